// glibc malloc settings for tensor-sized blocks (mallopt); a reasoned no-op on other C libraries.
#include "ipj/device/allocator.hpp"

#include <atomic>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace ipj::device {
namespace {

constexpr int kKibibyte = 1024;
constexpr int kMebibyte = 1024 * kKibibyte;
std::atomic<MallocSettings> settings_in_this_process{MallocSettings::untouched};

#if defined(__GLIBC__)
bool set_malloc(int mmap_threshold, int trim_threshold, int top_pad) {
  return mallopt(M_MMAP_THRESHOLD, mmap_threshold) == 1 && mallopt(M_TRIM_THRESHOLD, trim_threshold) == 1 &&
         mallopt(M_TOP_PAD, top_pad) == 1;
}
#endif

}  // namespace

AllocatorPlan tune_allocator() {
#if defined(__GLIBC__)
  const bool applied = set_malloc(256 * kMebibyte, 1024 * kMebibyte, 64 * kMebibyte);
  if (applied) settings_in_this_process.store(MallocSettings::tuned);
  return {applied, applied ? "glibc: blocks up to 256 MiB reused from the heap (mmap threshold 256 MiB, trim "
                             "1 GiB, top pad 64 MiB): no page faults on every batch's activations"
                           : "glibc refused the malloc settings; left as they were"};
#else
  return {false, "not glibc: allocator left as it is"};
#endif
}

AllocatorPlan system_allocator() {
  switch (settings_in_this_process.load()) {
    case MallocSettings::tuned:
      return {false,
              "system plan requested, but this process already tuned the allocator (glibc cannot undo "
              "it): large blocks are still reused from the heap"};
    case MallocSettings::restored:
      return {false,
              "system: glibc's start values (128 KiB mmap threshold), restored after a tuned run in this "
              "process; glibc's dynamic threshold stays off"};
    case MallocSettings::untouched:
      break;
  }
  return {false,
          "system: glibc's defaults (large blocks mapped and faulted in per allocation until its "
          "dynamic threshold grows)"};
}

ScopedAllocator::ScopedAllocator(AllocatorChoice choice)
    : previous_(current_malloc_settings()), plan_(apply_allocator(choice)) {}

ScopedAllocator::~ScopedAllocator() {
  restore_malloc_settings(previous_);
}

AllocatorPlan apply_allocator(AllocatorChoice choice) {
  return choice == AllocatorChoice::tuned ? tune_allocator() : system_allocator();
}

MallocSettings current_malloc_settings() {
  return settings_in_this_process.load();
}

void restore_malloc_settings(MallocSettings settings) {
  if (settings == current_malloc_settings()) return;
  if (settings == MallocSettings::tuned) {
    tune_allocator();
    return;
  }
#if defined(__GLIBC__)
  if (set_malloc(128 * kKibibyte, 128 * kKibibyte, 128 * kKibibyte)) {
    settings_in_this_process.store(MallocSettings::restored);
    malloc_trim(0);  // give back what the tuned settings kept in the heap
  }
#endif
}

}  // namespace ipj::device
