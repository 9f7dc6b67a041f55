// Applying and restoring thread counts and malloc settings around a library call.
#include "ipj/device/process_settings.hpp"

#include <ATen/Parallel.h>
#include <spdlog/spdlog.h>

#include <mutex>

#include "ipj/device/blas_info.hpp"

namespace ipj::device {
namespace {

// Once per process, at debug level: BLAS kernels below the CPU's ISA slow every fp32 GEMM of the run (ipj
// cannot switch them: OpenBLAS picks them when it loads). Not a warning: a failing command's stderr is its
// one error line; `ipj devices` and results' threads.blas_kernels say it to everyone.
void log_blas_kernels_once() {
  static std::once_flag logged;
  std::call_once(logged, [] {
    if (const BlasInfo& blas = loaded_blas(); !blas.advice.empty()) spdlog::debug("{}", blas.advice);
  });
}

}  // namespace

ScopedProcessSettings::ScopedProcessSettings(ThreadPlan threads, std::optional<AllocatorChoice> allocator)
    : threads_(std::move(threads)),
      previous_torch_threads_(at::get_num_threads()),
      previous_blas_threads_(blas_thread_count()) {
  apply_thread_plan(threads_);
  log_blas_kernels_once();
  if (allocator) allocator_.emplace(*allocator);
}

ScopedProcessSettings::~ScopedProcessSettings() {
  ThreadPlan previous{previous_torch_threads_, previous_blas_threads_, ""};
  if (previous.blas_threads < 1) previous.blas_threads = threads_.blas_threads;  // not OpenBLAS: unused
  apply_thread_plan(previous);
}

}  // namespace ipj::device
