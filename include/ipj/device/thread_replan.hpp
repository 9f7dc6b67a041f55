// Re-planning threads in the middle of a run: when the background load sampler has seen other work for a
// while, the two pools shrink by the CPUs it takes (at least one thread each); when it has been quiet again
// for a while, they grow to the run's quiet plan (also when the run started busy, on a smaller plan). At most
// kMaxReplans changes per run (a neighbour that comes and goes must not make the pools thrash). Only for
// ipj's own plan (not --threads N, --thread-plan python or IPJ_STATIC_THREADS=1). A pool of one thread has no
// barrier to wait at, which is what a neighbour that arrives after the start costs a spinning or sleeping
// pool.
#pragma once

#include <optional>
#include <string>

#include "ipj/core/json_io.hpp"
#include "ipj/device/machine_load.hpp"
#include "ipj/device/threading.hpp"

namespace ipj::device {

// Intervals of the sampler (0.5 s each) in a row with other work >= kBusyOtherCpus before the pools shrink,
// and with other work < kQuietOtherCpus before they grow back; changes per run at most.
inline constexpr int kBusyIntervalsToReplan = 2;
inline constexpr int kQuietIntervalsToGrow = 4;
inline constexpr int kMaxReplans = 4;

// A change of the pools that the sampler's readings call for.
struct PlanChange {
  ThreadPlan to;       // the plan to run from now on (reason says why)
  std::string action;  // "shrink" or "grow"
  double other_cpus = 0.0;
};

class BusyReplanner {
 public:
  // `plan`: the run's plan as applied; `quiet_plan`: the plan on a quiet machine (== plan when the start
  // was quiet); `allowed`: false for a plan the user fixed (see above); `max_changes`: changes per run at
  // most (0: no bound, for a server; its change list then keeps the last kKeptChanges).
  BusyReplanner(ThreadPlan plan, ThreadPlan quiet_plan, bool allowed, int max_changes = kMaxReplans)
      : quiet_plan_(std::move(quiet_plan)),
        allowed_(allowed),
        max_changes_(max_changes),
        current_(std::move(plan)) {}
  BusyReplanner(const ThreadPlan& plan, bool allowed) : BusyReplanner(plan, plan, allowed) {}
  // The change due now from the sampler's busy_intervals_in_a_row(), quiet_intervals_in_a_row() and
  // recent_other_cpus(), without applying it; nullopt when none is.
  std::optional<PlanChange> due(int busy_intervals_in_a_row, int quiet_intervals_in_a_row,
                                double recent_other_cpus) const;
  // Records `change` as applied by the caller: its plan is the current one from now on. `epoch`: 0-based, or
  // -1 where there are none (a server).
  void record(const PlanChange& change, int epoch);
  // Between steps, on the thread that runs them: applies (apply_thread_plan) and records the change due;
  // true when it changed the pools now.
  bool check(int busy_intervals_in_a_row, int quiet_intervals_in_a_row, double recent_other_cpus, int epoch);
  const ThreadPlan& current() const { return current_; }
  int changes_total() const { return changes_total_; }
  // The first shrink (threads.replanned): null when the run kept its plan; else {epoch, other_cpus,
  // torch_before, torch_after, blas_before, blas_after, reason}.
  Json to_json() const { return first_shrink_; }
  // Every change (threads.replans): [{action: "shrink" | "grow", epoch, other_cpus, torch_before, ...}].
  Json changes_json() const { return changes_; }

  static constexpr std::size_t kKeptChanges = 32;

 private:
  ThreadPlan quiet_plan_;
  bool allowed_;
  int max_changes_;
  ThreadPlan current_;
  int changes_total_ = 0;
  Json first_shrink_;
  Json changes_ = Json::array();
};

}  // namespace ipj::device
