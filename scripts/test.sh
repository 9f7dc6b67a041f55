#!/usr/bin/env bash
# README command 2 (and .ci/run): install, check formatting, build with warnings as errors, run the whole suite.
# The tests' peers (python3-torch, Chromium, Prometheus, Node.js: ~230 packages on a fresh machine) install in the
# background while the tests compile; their log is printed if that install fails. An interrupted run waits for
# that install to finish (a killed dpkg leaves the machine's packages half-configured).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --build
bash scripts/install-deps.sh --check # not root and packages missing: say so now, not after the build
mkdir -p build
peers_log=build/install-test-peers.log
bash scripts/install-deps.sh >"$peers_log" 2>&1 &
peers_pid=$!
echo "test.sh: installing the tests' peers in the background (log: $peers_log)"
finish_install() {
  echo "test.sh: interrupted; waiting for the package install to finish (log: $peers_log)" >&2
  wait "$peers_pid" || true
  exit 130
}
trap finish_install INT TERM
build_status=0
bash scripts/format.sh --check && bash scripts/build.sh -DIPJ_BUILD_TESTS=ON -DIPJ_BUILD_BENCH=ON ||
  build_status=$? # after demo.sh: only what it did not build
peers_status=0
wait "$peers_pid" || peers_status=$?
trap - INT TERM
if [ "$peers_status" -ne 0 ]; then
  cat "$peers_log" >&2
  echo "test.sh: installing the tests' peers failed (exit $peers_status; log above)" >&2
fi
if [ "$build_status" -ne 0 ]; then
  echo "test.sh: the format check or the build failed (exit $build_status; its errors are above)" >&2
  exit "$build_status"
fi
[ "$peers_status" -eq 0 ] || exit "$peers_status"
echo "test.sh: the tests' peers are installed"
bash scripts/install-onnxruntime.sh
cd build
ctest --output-on-failure -j2 --timeout 900
