// Host allocator settings for LibTorch CPU work. glibc serves blocks above its mmap threshold (128 KiB at
// start) with fresh mmap()s, so every batch's activations (a cnn's [128, 32, 28, 28] fp32 is 12.8 MB) are
// page-faulted and zeroed by the kernel again, step after step. Limits: glibc only (elsewhere a no-op that
// says so); the settings are process-wide and trade resident memory (freed blocks stay in the heap) for
// speed.
#pragma once

#include <string>

namespace ipj::device {

struct AllocatorPlan {
  bool applied = false;  // false: nothing changed (not glibc, or the system plan)
  std::string reason;    // what was set and why, for results and logs
};

// Keeps large freed blocks in the heap for reuse: mmap threshold 256 MiB, trim threshold 1 GiB, top pad 64
// MiB.
AllocatorPlan tune_allocator();
// Leaves glibc as it is (its default: a 128 KiB mmap threshold that grows as large blocks are freed). glibc
// cannot switch that growth back on once set, so after tune_allocator() in the same process this says so.
AllocatorPlan system_allocator();

}  // namespace ipj::device
