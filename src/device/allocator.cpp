// glibc malloc settings for tensor-sized blocks (mallopt); a reasoned no-op on other C libraries.
#include "ipj/device/allocator.hpp"

#include <atomic>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace ipj::device {
namespace {

constexpr int kMebibyte = 1024 * 1024;
std::atomic<bool> tuned_in_this_process{false};

}  // namespace

AllocatorPlan tune_allocator() {
#if defined(__GLIBC__)
  const bool applied = mallopt(M_MMAP_THRESHOLD, 256 * kMebibyte) == 1 &&
                       mallopt(M_TRIM_THRESHOLD, 1024 * kMebibyte) == 1 &&
                       mallopt(M_TOP_PAD, 64 * kMebibyte) == 1;
  if (applied) tuned_in_this_process.store(true);
  return {applied, applied ? "glibc: blocks up to 256 MiB reused from the heap (mmap threshold 256 MiB, trim "
                             "1 GiB, top pad 64 MiB): no page faults on every batch's activations"
                           : "glibc refused the malloc settings; left as they were"};
#else
  return {false, "not glibc: allocator left as it is"};
#endif
}

AllocatorPlan system_allocator() {
  if (tuned_in_this_process.load())
    return {false,
            "system plan requested, but this process already tuned the allocator (glibc cannot undo "
            "it): large blocks are still reused from the heap"};
  return {false,
          "system: glibc's defaults (large blocks mapped and faulted in per allocation until its "
          "dynamic threshold grows)"};
}

}  // namespace ipj::device
