// The threads `ipj serve` runs batches on, for as long as it runs: planned once the models are loaded (their
// workloads, the CPUs really available, the load at start) and re-planned when other work comes and goes
// beside the server (device::BusyReplanner's rules, no bound on the changes). Limits: one plan for the whole
// process (OpenBLAS's count is the process's); a change waits for the batches running on other workers.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ipj/device/machine_load.hpp"
#include "ipj/device/thread_replan.hpp"
#include "ipj/device/threading.hpp"

namespace ipj::serve {

class ServeThreads {
 public:
  // `fixed_threads` > 0 (--threads N): that many, never re-planned; 0: ipj's plan, re-planned (unless
  // IPJ_STATIC_THREADS=1).
  explicit ServeThreads(int fixed_threads = 0);
  // --threads N's N (0: ipj's plan): the pool the models' engines are timed on at load.
  int fixed_threads() const { return fixed_threads_; }
  // Whether the plan may change while serving (no --threads, no IPJ_STATIC_THREADS=1).
  bool replans() const;
  ~ServeThreads();
  ServeThreads(const ServeThreads&) = delete;
  ServeThreads& operator=(const ServeThreads&) = delete;

  // After the models loaded, before any batch: plans for their workloads (device::thread_workload of each),
  // sets OpenBLAS's count and starts the load sampler when re-planning is allowed.
  void start(const std::vector<device::ThreadWorkload>& workloads);

  // Held by a batcher worker while it runs one batch: on entry, the change the sampler's readings call for
  // is applied first (once the batches on other workers are done), then the plan's ATen threads on this
  // thread: its share of them while other batches run (plan / the most batches running at once in the last
  // 0.2 s, at least 1; --threads N: N).
  class BatchScope {
   public:
    explicit BatchScope(ServeThreads* threads) : threads_(threads) {}
    ~BatchScope();
    BatchScope(BatchScope&& other) noexcept : threads_(other.threads_) { other.threads_ = nullptr; }
    BatchScope(const BatchScope&) = delete;
    BatchScope& operator=(const BatchScope&) = delete;
    BatchScope& operator=(BatchScope&&) = delete;

   private:
    ServeThreads* threads_;
  };
  BatchScope enter_batch();

  // ipj_threads{pool="aten"|"openblas"}, ipj_thread_replans_total{action="shrink"|"grow"},
  // ipj_other_cpus (the sampler's last interval; only while re-planning).
  std::string prometheus_text() const;

 private:
  void replan_if_due();
  // On the sampler's thread after each interval: the change due, made now where no batch runs (an idle
  // server grows back without waiting for traffic); else the next batch makes it.
  void replan_while_idle(int busy, int quiet, double other);
  // Under mutex_ with no batch running: OpenBLAS's count and the plan batches read.
  void apply(const device::PlanChange& change);
  void leave_batch();

  int fixed_threads_;
  mutable std::mutex mutex_;  // plan_, replanner_, the gate below
  std::condition_variable gate_;
  int running_batches_ = 0;
  // The most batches running at once lately (a window of kRecentPeakWindow from when it was seen).
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kRecentPeakWindow{200};
  int recent_peak_ = 0;
  Clock::time_point recent_peak_at_{};
  bool changing_ = false;  // a change waits for the running batches; new batches wait for it
  device::ThreadPlan plan_;
  std::optional<device::BusyReplanner> replanner_;
  std::unique_ptr<device::LoadSampler> sampler_;
  std::atomic<int> torch_threads_{0};  // 0 until start(): batches leave their threads alone
  std::atomic<int> shrinks_{0}, grows_{0};
};

}  // namespace ipj::serve
