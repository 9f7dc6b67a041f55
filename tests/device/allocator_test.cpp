// Allocator plans: after tune_allocator(), a batch-sized block comes from the heap instead of a fresh mmap()
// (what removes the per-batch page faults), and the system plan reports that it cannot undo the tuning.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "ipj/device/allocator.hpp"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace ipj::device {
namespace {

#if defined(__GLIBC__)
TEST(Allocator, TunedPlanServesBatchSizedBlocksFromTheHeap) {
  constexpr std::size_t kBlock = 16u * 1024 * 1024;  // a cnn's batch activations are about this large
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer replaces glibc's malloc: mallopt and mallinfo2 do not apply";
#endif
  const AllocatorPlan plan = tune_allocator();
  ASSERT_TRUE(plan.applied) << plan.reason;
  EXPECT_NE(plan.reason.find("256 MiB"), std::string::npos);
  const std::size_t mapped_before = mallinfo2().hblkhd;  // bytes in mmap()ed blocks
  void* block = std::malloc(kBlock);
  ASSERT_NE(block, nullptr);
  std::memset(block, 1, kBlock);
  EXPECT_EQ(mallinfo2().hblkhd, mapped_before) << "the block was mmap()ed despite the tuned threshold";
  std::free(block);
  // Freed, it stays in the heap (trim threshold 1 GiB) for the next batch.
  const std::size_t heap_after_free = mallinfo2().arena;
  EXPECT_GE(heap_after_free, kBlock);

  const AllocatorPlan system = system_allocator();
  EXPECT_FALSE(system.applied);
  EXPECT_NE(system.reason.find("already tuned"), std::string::npos) << system.reason;
}
#endif

}  // namespace
}  // namespace ipj::device
