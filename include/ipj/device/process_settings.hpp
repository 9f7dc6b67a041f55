// Process-wide settings for LibTorch CPU work, applied for one scope: the thread counts of ATen's OpenMP pool
// and of OpenBLAS, and glibc's malloc settings. The destructor puts back what it found, so a library call
// (a training run, a bench) leaves the process as it was. Limits: not thread-safe (the settings are the
// process's); glibc's dynamic mmap threshold cannot be switched back on once a tuned scope set a threshold.
#pragma once

#include <optional>

#include "ipj/device/allocator.hpp"
#include "ipj/device/threading.hpp"

namespace ipj::device {

class ScopedProcessSettings {
 public:
  // Applies `threads`, and the allocator plan when one is given (nullopt: malloc settings left alone).
  explicit ScopedProcessSettings(ThreadPlan threads, std::optional<AllocatorChoice> allocator = std::nullopt);
  ~ScopedProcessSettings();
  ScopedProcessSettings(const ScopedProcessSettings&) = delete;
  ScopedProcessSettings& operator=(const ScopedProcessSettings&) = delete;

  const ThreadPlan& threads() const { return threads_; }
  // What the allocator choice did (applied = false and an empty reason without one).
  const AllocatorPlan& allocator() const { return allocator_ ? allocator_->plan() : no_allocator_; }

 private:
  ThreadPlan threads_;
  int previous_torch_threads_ = 1;
  int previous_blas_threads_ = -1;  // -1: not OpenBLAS
  AllocatorPlan no_allocator_;
  // Destroyed after the destructor's body put the threads back: malloc settings are restored last.
  std::optional<ScopedAllocator> allocator_;
};

}  // namespace ipj::device
