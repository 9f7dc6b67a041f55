// Thread plans and the scoped process settings: the plan for each workload, and that a scope restores ATen's
// and OpenBLAS's thread counts and glibc's malloc settings when it ends (library calls leave the process as
// they found it).
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "ipj/device/process_settings.hpp"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace ipj::device {
namespace {

TEST(ThreadPlans, Fp32GemmsGiveOpenBlasTheCoresAndOneDnnWorkGivesThemToAten) {
  const ThreadPlan gemm = plan_threads(ThreadWorkload::fp32_gemm, 6);
  EXPECT_EQ(gemm.torch_threads, 1);
  EXPECT_EQ(gemm.blas_threads, 6);
  EXPECT_NE(gemm.reason.find("OpenBLAS on 6"), std::string::npos) << gemm.reason;
  const ThreadPlan onednn = plan_threads(ThreadWorkload::onednn, 6);
  EXPECT_EQ(onednn.torch_threads, 6);
  EXPECT_EQ(onednn.blas_threads, 1);
  // 0 cores = every online core.
  EXPECT_EQ(plan_threads(ThreadWorkload::fp32_gemm, 0).blas_threads, online_cores());
  EXPECT_EQ(plan_threads(ThreadWorkload::onednn, 0).torch_threads, online_cores());
}

TEST(ThreadPlans, WorkloadFollowsPrecisionAndConvolutions) {
  EXPECT_EQ(thread_workload(/*fp32=*/true, /*convolutional=*/false), ThreadWorkload::fp32_gemm);
  EXPECT_EQ(thread_workload(true, true), ThreadWorkload::onednn);
  EXPECT_EQ(thread_workload(false, false), ThreadWorkload::onednn);
}

TEST(ThreadPlans, PythonPlanIsTorchsDefaultWhateverTheWorkload) {
  const ThreadPlan python = plan_for(ThreadPlanChoice::python, ThreadWorkload::onednn, 4);
  EXPECT_EQ(python.torch_threads, 1);
  EXPECT_EQ(python.blas_threads, 4);
  EXPECT_EQ(plan_for(ThreadPlanChoice::tuned, ThreadWorkload::onednn, 4).torch_threads, 4);
  EXPECT_EQ(parse_choice<ThreadPlanChoice>("python", "--thread-plan"), ThreadPlanChoice::python);
}

TEST(ScopedProcessSettings, AppliesThePlanAndRestoresThreadCounts) {
  at::set_num_threads(1);
  const int blas_before = blas_thread_count();
  {
    const ScopedProcessSettings settings(ThreadPlan{2, 1, "test"});
    EXPECT_EQ(at::get_num_threads(), 2);
    if (blas_before > 0) {
      EXPECT_EQ(blas_thread_count(), 1);
    }
    {
      const ScopedProcessSettings nested(ThreadPlan{3, 2, "nested"});
      EXPECT_EQ(at::get_num_threads(), 3);
    }
    EXPECT_EQ(at::get_num_threads(), 2);  // the nested scope put back what it found
  }
  EXPECT_EQ(at::get_num_threads(), 1);
  EXPECT_EQ(blas_thread_count(), blas_before);
}

#if defined(__GLIBC__)
TEST(ScopedProcessSettings, TunedAllocatorIsUndoneWhenTheScopeEnds) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer replaces glibc's malloc: mallopt and mallinfo2 do not apply";
#endif
  constexpr std::size_t kMebibyte = 1024 * 1024;
  auto block_is_mapped = [](std::size_t bytes) {  // true when the block comes from a fresh mmap()
    const std::size_t mapped_before = mallinfo2().hblkhd;
    void* volatile block = std::malloc(bytes);  // volatile and touched: the compiler cannot drop the pair
    static_cast<volatile char*>(block)[0] = 1;
    const bool mapped = mallinfo2().hblkhd > mapped_before;
    std::free(block);
    return mapped;
  };
  const MallocSettings before = current_malloc_settings();
  {
    const ScopedProcessSettings settings(plan_threads(ThreadWorkload::fp32_gemm, 1), AllocatorChoice::tuned);
    EXPECT_TRUE(settings.allocator().applied) << settings.allocator().reason;
    EXPECT_EQ(current_malloc_settings(), MallocSettings::tuned);
    EXPECT_FALSE(block_is_mapped(16 * kMebibyte));  // a batch's activations, from the heap
  }
  if (before == MallocSettings::tuned) {
    EXPECT_EQ(current_malloc_settings(), MallocSettings::tuned);  // an outer tuning stays
  } else {
    EXPECT_EQ(current_malloc_settings(), MallocSettings::restored);
    // Larger than any block freed in the heap so far (those are reused whatever the threshold), but below the
    // tuned 256 MiB threshold: mapped again only if glibc's start values are back.
    EXPECT_TRUE(block_is_mapped(192 * kMebibyte)) << "glibc's 128 KiB mmap threshold was not restored";
    EXPECT_NE(system_allocator().reason.find("restored"), std::string::npos);
  }
  // A scope without an allocator choice leaves malloc alone.
  const MallocSettings now = current_malloc_settings();
  { const ScopedProcessSettings threads_only(plan_threads(ThreadWorkload::onednn, 1)); }
  EXPECT_EQ(current_malloc_settings(), now);
}
#endif

}  // namespace
}  // namespace ipj::device
