// Re-planning threads in the middle of a run: when the background load sampler has seen other work for a
// while, the two pools shrink by the CPUs it takes (at least one thread each); when it has been quiet again
// for a while, they grow to the run's quiet plan (also when the run started busy, on a smaller plan). At most
// kMaxReplans changes per run (a neighbour that comes and goes must not make the pools thrash). Only for
// ipj's own plan (not --threads N, --thread-plan python or IPJ_STATIC_THREADS=1). A pool of one thread has no
// barrier to wait at, which is what a neighbour that arrives after the start costs a spinning or sleeping
// pool.
#pragma once

#include "ipj/core/json_io.hpp"
#include "ipj/device/machine_load.hpp"
#include "ipj/device/threading.hpp"

namespace ipj::device {

// Intervals of the sampler (0.5 s each) in a row with other work >= kBusyOtherCpus before the pools shrink,
// and with other work < kQuietOtherCpus before they grow back; changes per run at most.
inline constexpr int kBusyIntervalsToReplan = 2;
inline constexpr int kQuietIntervalsToGrow = 4;
inline constexpr int kMaxReplans = 4;

class BusyReplanner {
 public:
  // `plan`: the run's plan as applied; `quiet_plan`: the plan on a quiet machine (== plan when the start
  // was quiet); `allowed`: false for a plan the user fixed (see above).
  BusyReplanner(ThreadPlan plan, ThreadPlan quiet_plan, bool allowed)
      : quiet_plan_(std::move(quiet_plan)), allowed_(allowed), current_(std::move(plan)) {}
  BusyReplanner(const ThreadPlan& plan, bool allowed) : BusyReplanner(plan, plan, allowed) {}
  // Between steps, on the thread that runs them, with the sampler's busy_intervals_in_a_row(),
  // quiet_intervals_in_a_row() and recent_other_cpus(): applies a smaller plan, or the quiet plan, when due;
  // true when it changed the pools now.
  bool check(int busy_intervals_in_a_row, int quiet_intervals_in_a_row, double recent_other_cpus, int epoch);
  // The first shrink (threads.replanned): null when the run kept its plan; else {epoch, other_cpus,
  // torch_before, torch_after, blas_before, blas_after, reason}.
  Json to_json() const { return first_shrink_; }
  // Every change (threads.replans): [{action: "shrink" | "grow", epoch, other_cpus, torch_before, ...}].
  Json changes_json() const { return changes_; }

 private:
  void apply(const ThreadPlan& from, const ThreadPlan& to, const char* action, double other, int epoch);

  ThreadPlan quiet_plan_;
  bool allowed_;
  ThreadPlan current_;
  Json first_shrink_;
  Json changes_ = Json::array();
};

}  // namespace ipj::device
