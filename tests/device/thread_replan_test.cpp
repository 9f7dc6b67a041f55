// device::BusyReplanner on synthetic sampler readings: when it shrinks the pools (and by how much), that it
// does so once, never for a plan the user fixed, and what it records. The process's pools are put back after.
#include <gtest/gtest.h>

#include <ATen/Parallel.h>

#include "ipj/device/process_settings.hpp"
#include "ipj/device/thread_replan.hpp"

namespace ipj::device {
namespace {

TEST(BusyReplanner, ShrinksThePoolsOnceWhenANeighbourStaysAndRecordsIt) {
  const ThreadPlan plan(2, 2, "test plan");
  const ScopedProcessSettings settings(plan);  // restores the pools after the test
  BusyReplanner replanner(plan, /*allowed=*/true);
  EXPECT_FALSE(replanner.check(kBusyIntervalsToReplan - 1, 1.0, 0));  // not long enough yet
  EXPECT_TRUE(replanner.to_json().is_null());
  EXPECT_EQ(at::get_num_threads(), 2);
  EXPECT_TRUE(replanner.check(kBusyIntervalsToReplan, 0.96, 1));
  EXPECT_EQ(at::get_num_threads(), 1);
  const Json record = replanner.to_json();
  EXPECT_EQ(record["epoch"], 2);
  EXPECT_EQ(record["torch_before"], 2);
  EXPECT_EQ(record["torch_after"], 1);
  EXPECT_EQ(record["blas_after"], 1);
  EXPECT_DOUBLE_EQ(record["other_cpus"].get<double>(), 0.96);
  EXPECT_NE(record["reason"].get<std::string>().find("0.96 CPU(s) of other work"), std::string::npos);
  EXPECT_FALSE(replanner.check(kBusyIntervalsToReplan + 5, 1.5, 2));  // once per run
  EXPECT_EQ(replanner.to_json(), record);
}

TEST(BusyReplanner, AFixedPlanOrOneThreadStaysAsItIs) {
  const ThreadPlan plan(2, 1, "test plan");
  const ScopedProcessSettings settings(plan);
  BusyReplanner fixed(plan, /*allowed=*/false);  // --threads N, --thread-plan python, IPJ_STATIC_THREADS=1
  EXPECT_FALSE(fixed.check(10, 1.0, 0));
  EXPECT_EQ(at::get_num_threads(), 2);
  EXPECT_TRUE(fixed.to_json().is_null());
  BusyReplanner single(ThreadPlan(1, 1, "one thread"), /*allowed=*/true);
  EXPECT_FALSE(single.check(10, 1.0, 0));  // nothing to give up
  EXPECT_TRUE(single.to_json().is_null());
  // A neighbour of 3 CPUs beside a 2-thread pool: at least one thread stays.
  BusyReplanner big(ThreadPlan(2, 2, "test plan"), /*allowed=*/true);
  EXPECT_TRUE(big.check(kBusyIntervalsToReplan, 3.0, 0));
  EXPECT_EQ(big.to_json()["torch_after"], 1);
  EXPECT_EQ(big.to_json()["blas_after"], 1);
}

}  // namespace
}  // namespace ipj::device
