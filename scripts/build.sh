#!/usr/bin/env bash
# Configures and builds ipj (Release, Ninja, ccache, warnings as errors) into ./build.
# Usage: scripts/build.sh [extra cmake -D options]
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache: rewrite absolute paths so that fresh clones in other folders reuse the cache.
export CCACHE_BASEDIR="$PWD"
export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DIPJ_WERROR=ON "$@"
cmake --build build
