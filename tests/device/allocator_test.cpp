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

// A bench's or a server's scope: tuned inside (a batch-sized block from the heap), as before once it ends
// (glibc's start values here: the block mmap()ed again).
TEST(Allocator, ScopedAllocatorTunesForItsScopeAndPutsBackWhatWasThere) {
  constexpr std::size_t kBlock = 16u * 1024 * 1024;
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer replaces glibc's malloc: mallopt and mallinfo2 do not apply";
#endif
  restore_malloc_settings(MallocSettings::restored);  // a known start: glibc's start values
  ASSERT_EQ(current_malloc_settings(), MallocSettings::restored);
  const auto mapped_while_held = [&] {
    const std::size_t mapped_before = mallinfo2().hblkhd;
    void* block = std::malloc(kBlock);
    std::memset(block, 1, kBlock);
    const bool mapped = mallinfo2().hblkhd > mapped_before;
    std::free(block);
    return mapped;
  };
  {
    const ScopedAllocator tuned(AllocatorChoice::tuned);
    EXPECT_TRUE(tuned.plan().applied) << tuned.plan().reason;
    EXPECT_EQ(current_malloc_settings(), MallocSettings::tuned);
    EXPECT_FALSE(mapped_while_held());
  }
  EXPECT_EQ(current_malloc_settings(), MallocSettings::restored);
  EXPECT_TRUE(mapped_while_held());
}
#endif

}  // namespace
}  // namespace ipj::device
