// BusyReplanner: shrinks the run's thread pools once when a neighbour arrives mid-run (thread_replan.hpp).
#include "ipj/device/thread_replan.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "ipj/core/number_format.hpp"

namespace ipj::device {

bool BusyReplanner::check(int busy_intervals_in_a_row, double recent_other_cpus, int epoch) {
  if (done_ || !allowed_ || busy_intervals_in_a_row < kBusyIntervalsToReplan) return false;
  done_ = true;
  const double other = recent_other_cpus;  // rounded by the sampler
  const int leave = std::max(1, static_cast<int>(std::lround(other)));
  ThreadPlan smaller = plan_;
  smaller.torch_threads = std::max(1, plan_.torch_threads - leave);
  smaller.blas_threads = std::max(1, plan_.blas_threads - leave);
  if (smaller.torch_threads == plan_.torch_threads && smaller.blas_threads == plan_.blas_threads)
    return false;
  smaller.reason = format_number("%.2f", other) + " CPU(s) of other work for " +
                   std::to_string(kBusyIntervalsToReplan) + " sampler intervals in a row: leaving them " +
                   std::to_string(leave) + " CPU(s)";
  apply_thread_plan(smaller);
  record_ = Json{{"epoch", epoch + 1},
                 {"other_cpus", other},
                 {"torch_before", plan_.torch_threads},
                 {"torch_after", smaller.torch_threads},
                 {"blas_before", plan_.blas_threads},
                 {"blas_after", smaller.blas_threads},
                 {"reason", smaller.reason}};
  spdlog::info("threads re-planned in epoch {}: {} (ATen {} -> {}, OpenBLAS {} -> {})", epoch + 1,
               smaller.reason, plan_.torch_threads, smaller.torch_threads, plan_.blas_threads,
               smaller.blas_threads);
  return true;
}

}  // namespace ipj::device
