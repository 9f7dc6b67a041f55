// Re-planning threads in the middle of a run: when the background load sampler has seen other work for a
// while, the two pools shrink by the CPUs it takes (at least one thread each), once. Only for ipj's own plan
// (not --threads N, --thread-plan python or IPJ_STATIC_THREADS=1). A pool of one thread has no barrier to
// wait at, which is what a neighbour that arrives after the start costs a spinning or sleeping pool.
#pragma once

#include "ipj/core/json_io.hpp"
#include "ipj/device/machine_load.hpp"
#include "ipj/device/threading.hpp"

namespace ipj::device {

// Intervals of the sampler (0.5 s each) in a row with other work >= kBusyOtherCpus before the pools shrink.
inline constexpr int kBusyIntervalsToReplan = 2;

class BusyReplanner {
 public:
  // `plan`: the run's plan as applied; `allowed`: false for a plan the user fixed (see above).
  BusyReplanner(ThreadPlan plan, bool allowed) : plan_(std::move(plan)), allowed_(allowed) {}
  // Between steps, on the thread that runs them, with the sampler's busy_intervals_in_a_row() and
  // recent_other_cpus(): applies the smaller plan when due; true when it did now.
  bool check(int busy_intervals_in_a_row, double recent_other_cpus, int epoch);
  // null when the run kept its plan; else {epoch, other_cpus, torch_before, torch_after, blas_before,
  // blas_after, reason}.
  Json to_json() const { return record_; }

 private:
  ThreadPlan plan_;
  bool allowed_;
  bool done_ = false;
  Json record_;
};

}  // namespace ipj::device
