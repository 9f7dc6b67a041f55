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

std::optional<PlanChange> BusyReplanner::due(int busy_intervals_in_a_row, int quiet_intervals_in_a_row,
                                             double recent_other_cpus) const {
  if (!allowed_ || (max_changes_ > 0 && changes_total_ >= max_changes_)) return std::nullopt;
  const double other = recent_other_cpus;  // rounded by the sampler
  const bool smaller_than_quiet =
      current_.torch_threads < quiet_plan_.torch_threads || current_.blas_threads < quiet_plan_.blas_threads;
  if (smaller_than_quiet && quiet_intervals_in_a_row >= kQuietIntervalsToGrow) {
    PlanChange grow{quiet_plan_, "grow", other};
    grow.to.reason = streak_reason(other, kQuietIntervalsToGrow, "the quiet plan");
    return grow;
  }
  if (busy_intervals_in_a_row < kBusyIntervalsToReplan) return std::nullopt;
  const int leave = std::max(1, static_cast<int>(std::lround(other)));
  const int torch = std::max(1, quiet_plan_.torch_threads - leave);
  const int blas = std::max(1, quiet_plan_.blas_threads - leave);
  if (torch >= current_.torch_threads && blas >= current_.blas_threads) return std::nullopt;  // as small
  PlanChange shrink{quiet_plan_, "shrink", other};
  shrink.to.torch_threads = torch;
  shrink.to.blas_threads = blas;
  // what the pools give up: `leave` CPUs of the quiet plan, each pool keeping at least one thread (two
  // CPUs of other work on two CPUs: one thread each, not none)
  const int given = std::max(quiet_plan_.torch_threads - torch, quiet_plan_.blas_threads - blas);
  shrink.to.reason =
      streak_reason(other, kBusyIntervalsToReplan,
                    "the pools give it " + std::to_string(given) + " of the quiet plan's threads" +
                        (given < leave ? " (each keeps at least one)" : ""));
  return shrink;
}

bool BusyReplanner::check(int busy_intervals_in_a_row, int quiet_intervals_in_a_row, double recent_other_cpus,
                          int epoch) {
  const std::optional<PlanChange> change =
      due(busy_intervals_in_a_row, quiet_intervals_in_a_row, recent_other_cpus);
  if (!change) return false;
  apply_thread_plan(change->to);
  record(*change, epoch);
  return true;
}

void BusyReplanner::record(const PlanChange& change, int epoch) {
  const ThreadPlan& from = current_;
  const ThreadPlan& to = change.to;
  Json entry{{"action", change.action},         {"epoch", epoch >= 0 ? Json(epoch + 1) : Json(nullptr)},
             {"other_cpus", change.other_cpus}, {"torch_before", from.torch_threads},
             {"torch_after", to.torch_threads}, {"blas_before", from.blas_threads},
             {"blas_after", to.blas_threads},   {"reason", to.reason}};
  spdlog::info("threads re-planned ({}){}: {} (ATen {} -> {}, OpenBLAS {} -> {})", change.action,
               epoch >= 0 ? " in epoch " + std::to_string(epoch + 1) : std::string(), to.reason,
               from.torch_threads, to.torch_threads, from.blas_threads, to.blas_threads);
  if (change.action == "shrink" && first_shrink_.is_null()) {
    first_shrink_ = entry;
    first_shrink_.erase("action");
  }
  changes_.push_back(std::move(entry));
  if (max_changes_ == 0 && changes_.size() > kKeptChanges) changes_.erase(changes_.begin());
  changes_total_ += 1;
  current_ = to;  // last: `from` refers to current_
}

}  // namespace ipj::device
