// ServeThreads: the server's thread plan, its mid-run changes (a gate: a change waits for the running
// batches, new batches wait for the change) and each worker's ATen threads (set on the worker itself: OpenMP
// counts are per thread, and at::set_num_threads would rebuild LibTorch's shared pthreadpool under other
// workers).
#include "ipj/serve/serve_threads.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <sstream>

namespace ipj::serve {
namespace {

// One plan for every workload served: the largest ATen and OpenBLAS counts of their plans (a batch uses the
// pool of its kind; the two kinds do not run in one batch).
device::ThreadPlan plan_for_models(const std::vector<device::ThreadWorkload>& workloads, int fixed_threads,
                                   const device::MachineState& machine) {
  std::vector<device::ThreadWorkload> kinds = workloads;
  if (kinds.empty()) kinds.push_back(device::ThreadWorkload::onednn);
  std::sort(kinds.begin(), kinds.end());
  kinds.erase(std::unique(kinds.begin(), kinds.end()), kinds.end());
  device::ThreadPlan plan =
      device::plan_for_machine(device::ThreadPlanChoice::tuned, kinds.front(), fixed_threads, machine);
  for (std::size_t index = 1; index < kinds.size(); ++index) {
    const device::ThreadPlan other =
        device::plan_for_machine(device::ThreadPlanChoice::tuned, kinds[index], fixed_threads, machine);
    plan.torch_threads = std::max(plan.torch_threads, other.torch_threads);
    plan.blas_threads = std::max(plan.blas_threads, other.blas_threads);
    plan.reason += "; models of both kinds (GEMM-bound fp32 and oneDNN): ATen " +
                   std::to_string(plan.torch_threads) + ", OpenBLAS " + std::to_string(plan.blas_threads);
  }
  return plan;
}

}  // namespace

ServeThreads::ServeThreads(int fixed_threads) : fixed_threads_(std::max(0, fixed_threads)) {}

bool ServeThreads::replans() const {
  return fixed_threads_ == 0 && !device::static_thread_plans();
}

ServeThreads::~ServeThreads() {
  if (sampler_) sampler_->stop();
}

void ServeThreads::start(const std::vector<device::ThreadWorkload>& workloads) {
  const device::MachineState machine = device::read_machine_state();
  std::lock_guard<std::mutex> lock(mutex_);
  plan_ = plan_for_models(workloads, fixed_threads_, machine);
  const device::ThreadPlan quiet_plan =
      plan_for_models(workloads, fixed_threads_, device::quiet_machine(machine));
  const bool allowed = replans();
  replanner_.emplace(plan_, quiet_plan, allowed, /*max_changes=*/0);
  if (allowed)
    sampler_ = std::make_unique<device::LoadSampler>(
        machine.limits, std::chrono::milliseconds(500),
        [this](int busy, int quiet, double other) { replan_while_idle(busy, quiet, other); });
  device::set_blas_threads(plan_.blas_threads);  // no batch runs yet
  torch_threads_ = plan_.torch_threads;
  spdlog::info("threads: ATen {} per batch, OpenBLAS {} ({}){}", plan_.torch_threads, plan_.blas_threads,
               plan_.reason,
               allowed ? "; re-planned while serving when other work comes and goes"
                       : (fixed_threads_ > 0 ? "; --threads as given, not re-planned"
                                             : "; IPJ_STATIC_THREADS=1: not re-planned"));
}

void ServeThreads::replan_if_due() {
  if (!sampler_) return;
  const int busy = sampler_->busy_intervals_in_a_row(), quiet = sampler_->quiet_intervals_in_a_row();
  // neither streak long enough: nothing can be due (BusyReplanner::due), and the batch takes no lock here
  if (busy < device::kBusyIntervalsToReplan && quiet < device::kQuietIntervalsToGrow) return;
  const double other = sampler_->recent_other_cpus();
  std::unique_lock<std::mutex> lock(mutex_);
  if (!replanner_->due(busy, quiet, other)) return;
  gate_.wait(lock, [this] { return !changing_; });
  std::optional<device::PlanChange> change = replanner_->due(busy, quiet, other);  // another worker's?
  if (!change) return;
  changing_ = true;
  gate_.wait(lock, [this] { return running_batches_ == 0; });
  apply(*change);
  changing_ = false;
  gate_.notify_all();
}

void ServeThreads::replan_while_idle(int busy, int quiet, double other) {
  if (busy < device::kBusyIntervalsToReplan && quiet < device::kQuietIntervalsToGrow) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (running_batches_ > 0 || changing_) return;  // a batch runs: the next one re-plans
  if (const std::optional<device::PlanChange> change = replanner_->due(busy, quiet, other)) apply(*change);
}

void ServeThreads::apply(const device::PlanChange& change) {
  device::set_blas_threads(change.to.blas_threads);  // no batch runs: safe for OpenBLAS
  replanner_->record(change, /*epoch=*/-1);
  plan_ = replanner_->current();
  torch_threads_ = plan_.torch_threads;
  (change.action == "shrink" ? shrinks_ : grows_) += 1;
}

ServeThreads::BatchScope ServeThreads::enter_batch() {
  replan_if_due();
  int sharing = 0;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    gate_.wait(lock, [this] { return !changing_; });
    const int running = ++running_batches_;
    // the most batches that ran at once lately: a batch that starts alone under a steady concurrent load
    // would otherwise take every thread and share the cores with the next one a moment later
    const Clock::time_point now = Clock::now();
    if (running >= recent_peak_ || now - recent_peak_at_ > kRecentPeakWindow) {
      recent_peak_ = running;
      recent_peak_at_ = now;
    }
    sharing = recent_peak_;
  }
  // Batches running at once (a model's instances, several models) share the plan's ATen threads: each takes
  // plan / the most batches running at once in the last 0.2 s, at least 1, so that they do not wait on each
  // other's cores (two instances of a ResNet-18 on two CPUs at two threads each served 0.62-0.70x the
  // requests of one thread each). --threads N gives every batch N, as asked.
  const int plan_threads = torch_threads_.load();
  if (plan_threads > 0) {
    const int share = fixed_threads_ > 0 ? plan_threads : std::max(1, plan_threads / sharing);
    if (device::caller_openmp_threads() != share) device::set_caller_openmp_threads(share);
  }
  return BatchScope(this);
}

void ServeThreads::leave_batch() {
  std::lock_guard<std::mutex> lock(mutex_);
  running_batches_ -= 1;
  if (running_batches_ == 0) gate_.notify_all();
}

ServeThreads::BatchScope::~BatchScope() {
  if (threads_ != nullptr) threads_->leave_batch();
}

std::string ServeThreads::prometheus_text() const {
  std::ostringstream text;
  int torch = 0, blas = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    torch = plan_.torch_threads;
    blas = plan_.blas_threads;
  }
  text << "# HELP ipj_threads Threads a batch runs on now, per pool (re-planned when other work comes and "
          "goes)\n# TYPE ipj_threads gauge\n"
       << "ipj_threads{pool=\"aten\"} " << torch << "\nipj_threads{pool=\"openblas\"} " << blas << "\n"
       << "# HELP ipj_thread_replans_total Changes of the thread plan since start\n"
       << "# TYPE ipj_thread_replans_total counter\n"
       << "ipj_thread_replans_total{action=\"shrink\"} " << shrinks_.load() << "\n"
       << "ipj_thread_replans_total{action=\"grow\"} " << grows_.load() << "\n";
  if (sampler_)
    text << "# HELP ipj_other_cpus CPUs used by other work beside the server (last 0.5 s sampler interval)\n"
         << "# TYPE ipj_other_cpus gauge\nipj_other_cpus " << sampler_->recent_other_cpus() << "\n";
  return text.str();
}

}  // namespace ipj::serve
