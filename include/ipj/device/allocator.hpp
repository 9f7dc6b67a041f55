// Host allocator settings for LibTorch CPU work. glibc serves blocks above its mmap threshold (128 KiB at
// start) with fresh mmap()s, so every batch's activations (a cnn's [128, 32, 28, 28] fp32 is 12.8 MB) are
// page-faulted and zeroed by the kernel again, step after step. Limits: glibc only (elsewhere a no-op that
// says so); the settings are process-wide (apply them through device::ScopedProcessSettings, which restores
// them) and trade resident memory (freed blocks stay in the heap) for speed.
#pragma once

#include <array>
#include <string>
#include <utility>

#include "ipj/core/choice.hpp"

namespace ipj::device {

// --allocator: tuned (large freed blocks reused from the heap) | system (glibc as it is).
enum class AllocatorChoice { tuned, system };

struct AllocatorPlan {
  bool applied = false;  // false: nothing changed (not glibc, or the system plan)
  std::string reason;    // what was set and why, for results and logs
};

// Keeps large freed blocks in the heap for reuse: mmap threshold 256 MiB, trim threshold 1 GiB, top pad 64
// MiB.
AllocatorPlan tune_allocator();
// Leaves glibc as it is (its default: a 128 KiB mmap threshold that grows as large blocks are freed). glibc
// cannot switch that growth back on once a threshold was set, so after tune_allocator() in the same process
// this says so.
AllocatorPlan system_allocator();
// tune_allocator() or system_allocator().
AllocatorPlan apply_allocator(AllocatorChoice choice);

// The malloc settings ipj has set in this process (glibc offers no way to read them back).
enum class MallocSettings {
  untouched,  // glibc's start values with its dynamic mmap threshold
  tuned,      // tune_allocator()'s values
  restored,   // glibc's start values (128 KiB thresholds and top pad), dynamic threshold off for good
};
MallocSettings current_malloc_settings();
// Puts back what current_malloc_settings() returned earlier: the tuned values, or glibc's start values
// (128 KiB mmap and trim thresholds, 128 KiB top pad; the heap's free memory is returned to the system)
// when it was untouched or restored.
void restore_malloc_settings(MallocSettings settings);

// apply_allocator(choice) for one scope (a bench, a server's life), then what the process had before.
class ScopedAllocator {
 public:
  explicit ScopedAllocator(AllocatorChoice choice);
  ~ScopedAllocator();
  ScopedAllocator(const ScopedAllocator&) = delete;
  ScopedAllocator& operator=(const ScopedAllocator&) = delete;
  const AllocatorPlan& plan() const { return plan_; }

 private:
  MallocSettings previous_;
  AllocatorPlan plan_;
};

}  // namespace ipj::device

namespace ipj {
template <>
struct ChoiceNames<device::AllocatorChoice> {
  static constexpr std::array<std::pair<device::AllocatorChoice, const char*>, 2> names{
      {{device::AllocatorChoice::tuned, "tuned"}, {device::AllocatorChoice::system, "system"}}};
};
}  // namespace ipj
