// The CPUs this process really has (affinity, cgroup v1/v2 CPU quota) and how busy the machine is (load
// average, /proc/stat busy and steal time on our CPUs, cgroup throttling). LibTorch-free, Linux only: on
// other systems or without /proc the readings are empty and the machine counts as quiet.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ipj/core/json_io.hpp"

namespace ipj::device {

// Other work (all CPU time on our CPUs, steal included, minus this process's) at or above this many CPUs
// makes the machine "busy": a thread plan that takes every core then waits on preempted threads.
inline constexpr double kBusyOtherCpus = 0.5;
// Other work below this counts as quiet for a mid-run re-plan back to the full plan (below the busy
// threshold: a neighbour near it does not make the pools shrink and grow by turns).
inline constexpr double kQuietOtherCpus = 0.25;
// A mid-run re-plan shrinks the pools only while other work also holds CPUs our threads want: their time
// runnable but waiting for a CPU, per CPU-second they ran, at or above this (/proc/self/task/*/schedstat).
// Measured on Turin-BF16 (12-06), `ipj serve` with the cnn on two CPUs, 0.5-s intervals: 0.15-0.29 beside its
// closed-loop load generator (~0.9 CPU of other work whose clients run while the server waits for them:
// shrinking for it served 0.57-0.82x of --threads 2), 0.38-0.52 while the generator's clients start,
// 0.65-0.87 beside a busy loop on one CPU.
inline constexpr double kContendedWaitRatio = 0.55;
// Below this own CPU use in a window the wait ratio says nothing (an idle process): other work alone decides.
inline constexpr double kWaitRatioMinOwnCpus = 0.1;

// Jiffies summed over the cpuN lines of /proc/stat for a set of CPUs.
struct CpuTimes {
  std::uint64_t busy = 0;   // user + nice + system + irq + softirq + steal (guest is inside user)
  std::uint64_t steal = 0;  // time the hypervisor gave to other guests
  std::uint64_t total = 0;  // busy + idle + iowait
  int cpus = 0;             // cpuN lines summed
};

// `text`: /proc/stat. `cpus`: the CPU numbers to sum (empty: every cpuN line). Throws ipj::Error
// (invalid_input) when no cpuN line matches.
CpuTimes parse_proc_stat(const std::string& text, const std::vector<int>& cpus = {});
// cgroup v2 cpu.max ("max 100000" -> nullopt, "150000 100000" -> 1.5 CPUs).
std::optional<double> parse_cgroup2_cpu_max(const std::string& text);
// cgroup v1 cpu.cfs_quota_us / cpu.cfs_period_us ("-1" -> nullopt, "50000" / "100000" -> 0.5 CPUs).
std::optional<double> parse_cgroup1_quota(const std::string& quota_text, const std::string& period_text);
// /proc/loadavg's 1-minute figure.
std::optional<double> parse_loadavg(const std::string& text);
// cpu.stat's nr_throttled (v1 and v2).
std::optional<std::int64_t> parse_nr_throttled(const std::string& cpu_stat_text);

// The CPU quota of this process's cgroups (the smallest on the path to the root), read under `root` ("/" for
// the real machine; tests pass a folder with proc/self/cgroup and sys/fs/cgroup/...).
struct CgroupCpu {
  std::optional<double> quota;  // CPUs, e.g. 1.5; nullopt = no quota
  std::string quota_file;       // where it was read ("" without one)
  std::string stat_file;        // cpu.stat with nr_throttled ("" when not readable)
};
CgroupCpu read_cgroup_cpu(const std::string& root = "/");

// A cgroup task limit (pids.max; every thread is a task): the one with the least headroom on the way up from
// this process's cgroup (v1 pids controller or v2), or nullopt where none is set or readable.
struct TaskLimit {
  std::int64_t max = 0;      // pids.max
  std::int64_t current = 0;  // pids.current: tasks in that cgroup now, this process's threads included
  std::string file;          // the pids.max read
  std::int64_t spare() const { return max - current; }
};
std::optional<TaskLimit> read_task_limit(const std::string& root = "/");

// The CPUs this process may run on: the affinity mask, capped by the quota rounded up.
struct CpuLimits {
  std::vector<int> affinity;  // CPU numbers from sched_getaffinity (every online CPU when it fails)
  CgroupCpu cgroup;
  int available_cpus = 1;  // min(affinity size, ceil(quota)), at least 1
};
CpuLimits read_cpu_limits();
// The arithmetic of read_cpu_limits: min(affinity_cpus, ceil(quota)), at least 1.
int available_cpus(int affinity_cpus, std::optional<double> quota);

// One reading of the clocks that a load figure is the difference of.
struct RawLoadReading {
  CpuTimes times;
  double own_cpu_s = 0.0;            // this process's CPU time (all threads)
  std::optional<double> own_wait_s;  // its threads' time runnable but waiting for a CPU (live threads)
  double wall_s = 0.0;               // a steady clock
  std::optional<std::int64_t> nr_throttled;
};

// Load over a window: all figures in CPUs (1.0 = one CPU fully used) on this process's CPUs.
struct LoadSample {
  std::optional<double> loadavg_1m;
  double busy_cpus = 0.0;       // all work, steal included
  double steal_cpus = 0.0;      // stolen by the hypervisor
  double own_cpus = 0.0;        // this process
  double other_cpus = 0.0;      // busy - own (>= 0): neighbours and steal
  double other_cpus_max = 0.0;  // the largest interval's other_cpus (the background sampler's ticks)
  std::optional<std::int64_t> throttled_periods;  // cgroup periods throttled in the window
  // own run-queue wait / own CPU time in the window (null: unreadable, or own_cpus < kWaitRatioMinOwnCpus)
  std::optional<double> own_wait_ratio;
  double window_s = 0.0;
  int cpus = 0;
};

// The load between two readings (exact arithmetic on the jiffies; other_cpus_max = other_cpus).
LoadSample load_between(const RawLoadReading& first, const RawLoadReading& last);
bool is_busy(const LoadSample& sample);
// Busy, and this process's threads waited for CPUs (own_wait_ratio >= kContendedWaitRatio, or unknown):
// what makes a mid-run re-plan shrink.
bool is_contended(const LoadSample& sample);
// The run-queue wait (field 2 of /proc/<pid>/task/<tid>/schedstat, ns) in seconds; null on other text.
std::optional<double> parse_schedstat_wait_s(const std::string& text);

RawLoadReading read_raw_load(const CpuLimits& limits);
// Samples the machine over `window` (sleeping): the "before" figure of a run.
LoadSample sample_machine_load(const CpuLimits& limits,
                               std::chrono::milliseconds window = std::chrono::milliseconds(150));
Json to_json(const LoadSample& sample);
// {before, during, busy}: busy when either window had other work >= kBusyOtherCpus.
Json machine_load_json(const LoadSample& before, const LoadSample& during);

// What a thread plan is chosen from: the CPUs and the load just before the work.
struct MachineState {
  CpuLimits limits;
  LoadSample load;
  bool busy = false;  // is_busy(load), unless IPJ_STATIC_THREADS=1 (then false: plans ignore the load)
};
MachineState read_machine_state();
// `machine` as if nothing else ran on it (the plan a mid-run re-plan grows back to).
MachineState quiet_machine(MachineState machine);
// IPJ_STATIC_THREADS=1: thread plans ignore the load, at the start and mid-run (bit-identical reruns; the
// test suite sets it).
bool static_thread_plans();

// A light background thread that reads /proc/stat every `interval` while a run goes on; stop() gives the
// average over the whole run (and the busiest interval, the mean load average). `after_interval`, where
// given, is called on that thread after each interval with the streaks and the interval's other work (an
// idle server's re-plan); it must not call stop().
class LoadSampler {
 public:
  using IntervalCallback = std::function<void(int busy_in_a_row, int quiet_in_a_row, double other_cpus)>;
  explicit LoadSampler(CpuLimits limits, std::chrono::milliseconds interval = std::chrono::milliseconds(500),
                       IntervalCallback after_interval = {});
  ~LoadSampler();
  LoadSampler(const LoadSampler&) = delete;
  LoadSampler& operator=(const LoadSampler&) = delete;
  LoadSample stop();
  // The last interval's other work (CPUs) and how many intervals in a row were contended (is_contended),
  // or had < kQuietOtherCpus of it: what a mid-run re-plan reads (thread-safe).
  double recent_other_cpus() const { return recent_other_.load(); }
  int busy_intervals_in_a_row() const { return busy_streak_.load(); }
  int quiet_intervals_in_a_row() const { return quiet_streak_.load(); }

 private:
  void loop();

  CpuLimits limits_;
  std::chrono::milliseconds interval_;
  IntervalCallback after_interval_;
  RawLoadReading first_, previous_;
  double other_max_ = 0.0, loadavg_sum_ = 0.0;
  int loadavg_count_ = 0;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::atomic<double> recent_other_{0.0};
  std::atomic<int> busy_streak_{0};
  std::atomic<int> quiet_streak_{0};
  std::thread thread_;
};

}  // namespace ipj::device
