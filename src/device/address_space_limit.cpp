// The RLIMIT_AS check before kernels run: OpenBLAS's per-thread GEMM buffers either fit (and are mapped at
// once, by one GEMM) or the run stops with an error naming the limit, instead of hanging in OpenBLAS's
// allocator. Limits: reads VmSize from /proc/self/status; BLAS libraries other than OpenBLAS are not checked.
#include "ipj/device/address_space_limit.hpp"

#include <ATen/ATen.h>
#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "ipj/core/error.hpp"
#include "ipj/device/blas_info.hpp"
#include "ipj/device/threading.hpp"

namespace ipj::device {
namespace {

constexpr std::uint64_t kMiB = 1ULL << 20;
constexpr std::uint64_t kSpareBytes = 64 * kMiB;

std::uint64_t mapped_bytes_now() {
  std::ifstream status("/proc/self/status");
  std::string key;
  std::uint64_t kib = 0;
  while (status >> key) {
    if (key == "VmSize:" && status >> kib) return kib * 1024;
    status.ignore(1 << 12, '\n');
  }
  return 0;
}

void check_now() {
  rlimit address_space{};
  if (::getrlimit(RLIMIT_AS, &address_space) != 0 || address_space.rlim_cur == RLIM_INFINITY) return;
  if (loaded_blas().library != "OpenBLAS") return;
  const auto limit_bytes = static_cast<std::uint64_t>(address_space.rlim_cur);
  const std::uint64_t mapped_bytes = mapped_bytes_now();
  const int threads = std::max(1, blas_thread_count());
  if (const std::uint64_t short_by = blas_bytes_short(limit_bytes, mapped_bytes, threads)) {
    throw Error(
        ErrorCategory::runtime,
        "ulimit -v (RLIMIT_AS) is " + std::to_string(limit_bytes / kMiB) + " MiB and ipj already maps " +
            std::to_string(mapped_bytes / kMiB) + " MiB: OpenBLAS (LibTorch's fp32 GEMMs) needs " +
            std::to_string(threads) + " x 129 MiB more " +
            "for its GEMM buffers and hangs, rather than fails, without them; raise ulimit -v by at least " +
            std::to_string(short_by / kMiB + 1) +
            " MiB (training the mlp mapped ~1.2 GiB in all, the cnn ~1.8 GiB), or unset it");
  }
  const at::Tensor square =
      at::ones({512, 512}, at::kFloat);  // [512, 512]: OpenBLAS splits it over its threads
  (void)at::mm(square, square);
}

}  // namespace

std::uint64_t blas_bytes_short(std::uint64_t limit, std::uint64_t mapped, int blas_threads) {
  const std::uint64_t needed =
      mapped + static_cast<std::uint64_t>(std::max(1, blas_threads)) * kOpenBlasBufferBytes + kSpareBytes;
  return needed > limit ? needed - limit : 0;
}

void check_address_space_for_blas() {
  static const bool checked = (check_now(), true);  // once: a throw leaves it unset, and the process ends
  (void)checked;
}

}  // namespace ipj::device
