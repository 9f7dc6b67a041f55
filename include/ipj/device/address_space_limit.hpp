// A finite address-space limit (`ulimit -v`, RLIMIT_AS, as batch schedulers' h_vmem set it): OpenBLAS, which
// runs LibTorch's fp32 GEMMs, retries for ever when it cannot map a thread's 128 MiB GEMM buffer, so a run
// that met the limit in a GEMM hung (also at exit). Limits: Linux; OpenBLAS's buffers; stacks can still meet
// it.
#pragma once

#include <cstdint>

namespace ipj::device {

// OpenBLAS maps one buffer of this size (plus alignment) per thread on its first GEMM (strace of Debian's
// 0.3.21).
inline constexpr std::uint64_t kOpenBlasBufferBytes = 129ULL << 20;

// The check's arithmetic: the bytes OpenBLAS's buffers need, or 0 when the limit leaves them room (with
// 64 MiB to spare for the allocations around the first GEMM).
std::uint64_t blas_bytes_short(std::uint64_t limit, std::uint64_t mapped, int blas_threads);

// Under a finite RLIMIT_AS with OpenBLAS loaded: throws ipj::Error (runtime) naming the limit and what to
// raise it to when OpenBLAS's buffers cannot fit, else runs one fp32 GEMM so that they are mapped now and
// meeting the limit later fails in an allocation (ipj's out-of-memory error). Once per process; unlimited:
// does nothing.
void check_address_space_for_blas();

}  // namespace ipj::device
