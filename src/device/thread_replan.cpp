// BusyReplanner: shrinks the run's thread pools when a neighbour arrives mid-run and grows them to the quiet
// plan when it leaves (thread_replan.hpp).
#include "ipj/device/thread_replan.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "ipj/core/number_format.hpp"

namespace ipj::device {
namespace {

// "0.97 CPU(s) of other work for 2 sampler intervals in a row: <what>"
std::string streak_reason(double other, int intervals, const std::string& what) {
  return format_number("%.2f", other) + " CPU(s) of other work for " + std::to_string(intervals) +
         " sampler intervals in a row: " + what;
}

}  // namespace

bool BusyReplanner::check(int busy_intervals_in_a_row, int quiet_intervals_in_a_row, double recent_other_cpus,
                          int epoch) {
  if (!allowed_ || static_cast<int>(changes_.size()) >= kMaxReplans) return false;
  const double other = recent_other_cpus;  // rounded by the sampler
  const bool smaller_than_quiet =
      current_.torch_threads < quiet_plan_.torch_threads || current_.blas_threads < quiet_plan_.blas_threads;
  if (smaller_than_quiet && quiet_intervals_in_a_row >= kQuietIntervalsToGrow) {
    ThreadPlan full = quiet_plan_;
    full.reason = streak_reason(other, kQuietIntervalsToGrow, "the quiet plan");
    apply(current_, full, "grow", other, epoch);
    return true;
  }
  if (busy_intervals_in_a_row < kBusyIntervalsToReplan) return false;
  const int leave = std::max(1, static_cast<int>(std::lround(other)));
  ThreadPlan smaller = quiet_plan_;
  smaller.torch_threads = std::max(1, quiet_plan_.torch_threads - leave);
  smaller.blas_threads = std::max(1, quiet_plan_.blas_threads - leave);
  if (smaller.torch_threads >= current_.torch_threads && smaller.blas_threads >= current_.blas_threads)
    return false;  // already as small
  smaller.reason =
      streak_reason(other, kBusyIntervalsToReplan, "leaving them " + std::to_string(leave) + " CPU(s)");
  apply(current_, smaller, "shrink", other, epoch);
  if (first_shrink_.is_null()) {
    first_shrink_ = changes_.back();
    first_shrink_.erase("action");
  }
  return true;
}

void BusyReplanner::apply(const ThreadPlan& from, const ThreadPlan& to, const char* action, double other,
                          int epoch) {
  apply_thread_plan(to);
  changes_.push_back(Json{{"action", action},
                          {"epoch", epoch + 1},
                          {"other_cpus", other},
                          {"torch_before", from.torch_threads},
                          {"torch_after", to.torch_threads},
                          {"blas_before", from.blas_threads},
                          {"blas_after", to.blas_threads},
                          {"reason", to.reason}});
  spdlog::info("threads re-planned ({}) in epoch {}: {} (ATen {} -> {}, OpenBLAS {} -> {})", action,
               epoch + 1, to.reason, from.torch_threads, to.torch_threads, from.blas_threads,
               to.blas_threads);
  current_ = to;  // last: `from` may be current_
}

}  // namespace ipj::device
