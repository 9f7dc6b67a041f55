// device::BusyReplanner on synthetic sampler readings: when it shrinks the pools (and by how much), when it
// grows them back, its limit on changes, never for a plan the user fixed, and what it records. The process's
// pools are put back after.
#include <gtest/gtest.h>

#include <ATen/Parallel.h>

#include <optional>

#include "ipj/device/process_settings.hpp"
#include "ipj/device/thread_replan.hpp"

namespace ipj::device {
namespace {

TEST(BusyReplanner, ShrinksThePoolsWhenANeighbourStaysAndRecordsIt) {
  const ThreadPlan plan(2, 2, "test plan");
  const ScopedProcessSettings settings(plan);  // restores the pools after the test
  BusyReplanner replanner(plan, /*allowed=*/true);
  EXPECT_FALSE(replanner.check(kBusyIntervalsToReplan - 1, 0, 1.0, 0));  // not long enough yet
  EXPECT_TRUE(replanner.to_json().is_null());
  EXPECT_EQ(at::get_num_threads(), 2);
  EXPECT_TRUE(replanner.check(kBusyIntervalsToReplan, 0, 0.96, 1));
  EXPECT_EQ(at::get_num_threads(), 1);
  const Json record = replanner.to_json();
  EXPECT_EQ(record["epoch"], 2);
  EXPECT_EQ(record["torch_before"], 2);
  EXPECT_EQ(record["torch_after"], 1);
  EXPECT_EQ(record["blas_after"], 1);
  EXPECT_FALSE(record.contains("action"));
  EXPECT_DOUBLE_EQ(record["other_cpus"].get<double>(), 0.96);
  EXPECT_NE(record["reason"].get<std::string>().find("0.96 CPU(s) of other work"), std::string::npos);
  EXPECT_FALSE(replanner.check(kBusyIntervalsToReplan + 5, 0, 1.5, 2));  // already smaller
  EXPECT_EQ(replanner.to_json(), record);
  ASSERT_EQ(replanner.changes_json().size(), 1u);
  EXPECT_EQ(replanner.changes_json()[0]["action"], "shrink");
}

TEST(BusyReplanner, GrowsBackWhenTheNeighbourLeavesAndStopsAfterTheLimit) {
  const ThreadPlan plan(2, 2, "test plan");
  const ScopedProcessSettings settings(plan);
  BusyReplanner replanner(plan, /*allowed=*/true);
  EXPECT_FALSE(replanner.check(0, 10, 0.0, 0));  // quiet from the start: nothing to restore
  ASSERT_TRUE(replanner.check(kBusyIntervalsToReplan, 0, 1.0, 0));
  EXPECT_FALSE(replanner.check(0, kQuietIntervalsToGrow - 1, 0.1, 1));  // not quiet for long enough
  EXPECT_EQ(at::get_num_threads(), 1);
  EXPECT_TRUE(replanner.check(0, kQuietIntervalsToGrow, 0.04, 1));
  EXPECT_EQ(at::get_num_threads(), 2);
  const Json restore = replanner.changes_json().back();
  EXPECT_EQ(restore["action"], "grow");
  EXPECT_EQ(restore["epoch"], 2);
  EXPECT_EQ(restore["torch_before"], 1);
  EXPECT_EQ(restore["torch_after"], 2);
  EXPECT_EQ(restore["blas_after"], 2);
  EXPECT_NE(restore["reason"].get<std::string>().find("the quiet plan"), std::string::npos);
  // The neighbour comes back: smaller again; threads.replanned keeps the first shrink.
  EXPECT_TRUE(replanner.check(kBusyIntervalsToReplan, 0, 1.0, 2));
  EXPECT_EQ(replanner.to_json()["epoch"], 1);
  EXPECT_TRUE(replanner.check(0, kQuietIntervalsToGrow, 0.0, 3));
  ASSERT_EQ(static_cast<int>(replanner.changes_json().size()), kMaxReplans);
  // After kMaxReplans changes the pools stay as they are, however the load moves.
  EXPECT_FALSE(replanner.check(kBusyIntervalsToReplan + 3, 0, 1.2, 4));
  EXPECT_EQ(at::get_num_threads(), 2);
}

TEST(BusyReplanner, ARunThatStartedBusyGrowsToTheQuietPlanWhenTheMachineQuietens) {
  const ThreadPlan busy_start(1, 1, "busy at start"), quiet_plan(2, 2, "quiet plan");
  const ScopedProcessSettings settings(busy_start);
  BusyReplanner replanner(busy_start, quiet_plan, /*allowed=*/true);
  EXPECT_FALSE(replanner.check(kBusyIntervalsToReplan + 2, 0, 1.0, 0));  // still busy: already small
  EXPECT_FALSE(replanner.check(0, kQuietIntervalsToGrow - 1, 0.1, 0));
  EXPECT_TRUE(replanner.check(0, kQuietIntervalsToGrow, 0.1, 1));
  EXPECT_EQ(at::get_num_threads(), 2);
  EXPECT_EQ(replanner.changes_json().back()["action"], "grow");
  EXPECT_TRUE(replanner.to_json().is_null());  // no shrink yet
  EXPECT_TRUE(replanner.check(kBusyIntervalsToReplan, 0, 1.0, 2));
  EXPECT_EQ(at::get_num_threads(), 1);
  EXPECT_EQ(replanner.to_json()["epoch"], 3);
}

TEST(BusyReplanner, AFixedPlanOrOneThreadStaysAsItIs) {
  const ThreadPlan plan(2, 1, "test plan");
  const ScopedProcessSettings settings(plan);
  BusyReplanner fixed(plan, /*allowed=*/false);  // --threads N, --thread-plan python, IPJ_STATIC_THREADS=1
  EXPECT_FALSE(fixed.check(10, 0, 1.0, 0));
  EXPECT_EQ(at::get_num_threads(), 2);
  EXPECT_TRUE(fixed.to_json().is_null());
  EXPECT_TRUE(fixed.changes_json().empty());
  BusyReplanner single(ThreadPlan(1, 1, "one thread"), /*allowed=*/true);
  EXPECT_FALSE(single.check(10, 0, 1.0, 0));  // nothing to give up
  EXPECT_FALSE(single.check(0, 10, 0.0, 1));  // nothing to restore
  EXPECT_TRUE(single.to_json().is_null());
  // A neighbour of 3 CPUs beside a 2-thread pool: at least one thread stays.
  BusyReplanner big(ThreadPlan(2, 2, "test plan"), /*allowed=*/true);
  EXPECT_TRUE(big.check(kBusyIntervalsToReplan, 0, 3.0, 0));
  EXPECT_EQ(big.to_json()["torch_after"], 1);
  EXPECT_EQ(big.to_json()["blas_after"], 1);
}

// A server's replanner (max_changes 0): due() decides without touching the pools, record() adopts what the
// caller applied; no bound on the changes, the list keeps the last kKeptChanges, the total counts them all.
TEST(BusyReplanner, AServersReplannerHasNoBoundAndKeepsTheLastChanges) {
  const ThreadPlan plan(2, 2, "test plan");
  const ScopedProcessSettings settings(plan);
  BusyReplanner replanner(plan, plan, /*allowed=*/true, /*max_changes=*/0);
  for (int round = 0; round < 40; ++round) {
    const std::optional<PlanChange> shrink = replanner.due(kBusyIntervalsToReplan, 0, 1.0);
    ASSERT_TRUE(shrink) << "round " << round;
    EXPECT_EQ(shrink->action, "shrink");
    EXPECT_EQ(shrink->to.torch_threads, 1);
    EXPECT_EQ(shrink->to.blas_threads, 1);
    EXPECT_EQ(
        shrink->to.reason,
        "1.00 CPU(s) of other work for 2 sampler intervals in a row: the pools give it 1 of the quiet plan's "
        "threads");
    replanner.record(*shrink, -1);
    EXPECT_FALSE(replanner.due(kBusyIntervalsToReplan, 0, 1.0));  // already small
    const std::optional<PlanChange> grow = replanner.due(0, kQuietIntervalsToGrow, 0.0);
    ASSERT_TRUE(grow);
    EXPECT_EQ(grow->action, "grow");
    EXPECT_EQ(grow->to.blas_threads, 2);
    replanner.record(*grow, -1);
  }
  EXPECT_EQ(at::get_num_threads(), 2);  // due() and record() never touch the pools
  EXPECT_EQ(replanner.changes_total(), 80);
  // two CPUs of other work on a plan of two: each pool keeps one thread (it read "leaving them 2 CPU(s)")
  BusyReplanner crowded(plan, plan, /*allowed=*/true, /*max_changes=*/0);
  const std::optional<PlanChange> to_one = crowded.due(kBusyIntervalsToReplan, 0, 1.97);
  ASSERT_TRUE(to_one);
  EXPECT_EQ(to_one->to.torch_threads, 1);
  EXPECT_EQ(
      to_one->to.reason,
      "1.97 CPU(s) of other work for 2 sampler intervals in a row: the pools give it 1 of the quiet plan's "
      "threads (each keeps at least one)");
  ASSERT_EQ(replanner.changes_json().size(), BusyReplanner::kKeptChanges);
  EXPECT_EQ(replanner.changes_json().back()["action"], "grow");
  EXPECT_TRUE(replanner.changes_json().back()["epoch"].is_null());
  EXPECT_EQ(replanner.current().blas_threads, 2);
  EXPECT_TRUE(replanner.to_json()["epoch"].is_null());  // the first shrink, without an epoch
}

}  // namespace
}  // namespace ipj::device
