// Applying and restoring thread counts and malloc settings around a library call.
#include "ipj/device/process_settings.hpp"

#include <ATen/Parallel.h>

namespace ipj::device {

ScopedProcessSettings::ScopedProcessSettings(ThreadPlan threads, std::optional<AllocatorChoice> allocator)
    : threads_(std::move(threads)),
      previous_torch_threads_(at::get_num_threads()),
      previous_blas_threads_(blas_thread_count()) {
  apply_thread_plan(threads_);
  if (allocator) allocator_.emplace(*allocator);
}

ScopedProcessSettings::~ScopedProcessSettings() {
  ThreadPlan previous{previous_torch_threads_, previous_blas_threads_, ""};
  if (previous.blas_threads < 1) previous.blas_threads = threads_.blas_threads;  // not OpenBLAS: unused
  apply_thread_plan(previous);
}

}  // namespace ipj::device
