#!/usr/bin/env bash
# Configures and builds ipj (Release, Ninja, ccache, unity batches, warnings as errors) into ./build.
# Usage: scripts/build.sh [--target NAME]... [extra cmake -D options]   (no --target: every target)
set -euo pipefail
cd "$(dirname "$0")/.."
targets=()
while [ $# -gt 0 ] && [ "$1" = "--target" ]; do
  targets+=(--target "$2")
  shift 2
done
# ccache: rewrite absolute paths so that fresh clones in other folders reuse the cache.
export CCACHE_BASEDIR="$PWD"
export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DIPJ_WERROR=ON "$@"
cmake --build build "${targets[@]}"
