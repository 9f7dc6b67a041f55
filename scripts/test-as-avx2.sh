#!/usr/bin/env bash
# Runs the built test suite (./build, after scripts/test.sh or scripts/build.sh -DIPJ_BUILD_TESTS=ON) with
# LibTorch's CPU kernels held to AVX2, as on an AVX2-only CPU: ATen's vector code (ATEN_CPU_CAPABILITY),
# oneDNN's JIT kernels (ONEDNN_MAX_CPU_ISA: convolutions, matmuls, int8 without VNNI, so its 16-bit saturation)
# and OpenBLAS's kernels (Haswell). Not in CI (a second ~10-minute run); run it on an AVX-512 machine before
# landing changes to numerics, int8 or the linear-chain step, since CI's CPU varies between AVX2 and AVX-512.
# Limits: XNNPACK, ipj's own compiled passes and ATen's bf16 routing still see the CPU's real ISA (libcpuinfo),
# so tests that need bf16 to run skip (testing::onednn_refuses_bf16); nothing here replaces a real AVX2 CPU.
set -euo pipefail
cd "$(dirname "$0")/../build"
export ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 DNNL_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell
export IPJ_TEST_CACHE="${IPJ_TEST_CACHE:-$PWD/test-cache}"
../build/bin/ipj devices | sed -n '2,3p'
ctest --output-on-failure -j2 --timeout 900 "$@"
