#!/usr/bin/env bash
# README command 2 (and .ci/run): install, check formatting, build with warnings as errors, run the whole suite.
# The tests' peers (python3-torch, Chromium, Prometheus, Node.js: ~230 packages on a fresh machine) install in the
# background while the tests compile; their log is printed if that install fails.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --build
mkdir -p build
peers_log=build/install-test-peers.log
bash scripts/install-deps.sh >"$peers_log" 2>&1 &
peers_pid=$!
echo "test.sh: installing the tests' peers in the background (log: $peers_log)"
build_status=0
bash scripts/format.sh --check && bash scripts/build.sh -DIPJ_BUILD_TESTS=ON -DIPJ_BUILD_BENCH=ON ||
  build_status=$? # after demo.sh: only what it did not build
peers_status=0
wait "$peers_pid" || peers_status=$?
if [ "$peers_status" -ne 0 ]; then
  cat "$peers_log" >&2
  echo "test.sh: installing the tests' peers failed (exit $peers_status; log above)" >&2
  exit "$peers_status"
fi
tail -n 1 "$peers_log"
[ "$build_status" -eq 0 ] || exit "$build_status"
bash scripts/install-onnxruntime.sh
cd build
ctest --output-on-failure -j2 --timeout 900
