#!/usr/bin/env bash
# Builds the test suite with AddressSanitizer + UndefinedBehaviorSanitizer into ./build-asan and runs it.
# Not in CI (a second full LibTorch-heavy build doubles CI time); run it before landing risky changes.
# LibTorch itself is not instrumented; ASAN_OPTIONS below silence its known one-definition-rule noise.
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="$PWD"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DIPJ_SANITIZE=ON -DIPJ_BUILD_BENCH=OFF
cmake --build build-asan
export ASAN_OPTIONS="detect_leaks=0:detect_odr_violation=0:protect_shadow_gap=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
cd build-asan && ctest --output-on-failure -j2 "$@"
