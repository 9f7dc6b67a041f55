// Reading the CPUs available to this process (affinity, cgroup quota) and the machine's load (/proc/stat,
// /proc/loadavg, cgroup cpu.stat). Every reading is optional: a missing or unreadable file leaves the figure
// empty rather than failing a run.
#include "ipj/device/machine_load.hpp"
#include "ipj/device/openmp_binding.hpp"

#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ipj/core/environment.hpp"
#include "ipj/core/error.hpp"

namespace ipj::device {
namespace {

namespace fs = std::filesystem;

std::optional<std::string> read_small_file(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// This process's threads' run-queue wait summed (threads that exited are gone from it); null when
// /proc/self/task cannot be read.
std::optional<double> process_run_queue_wait_seconds() {
  std::error_code error;
  fs::directory_iterator tasks("/proc/self/task", error);
  if (error) return std::nullopt;
  double total_s = 0.0;
  bool any = false;
  for (const fs::directory_entry& task : tasks) {
    const std::optional<std::string> text = read_small_file(task.path() / "schedstat");
    const std::optional<double> wait_s = text ? parse_schedstat_wait_s(*text) : std::nullopt;
    if (!wait_s) continue;  // a thread that just exited
    total_s += *wait_s;
    any = true;
  }
  return any ? std::optional<double>(total_s) : std::nullopt;
}

double process_cpu_seconds() {
  timespec now{};
  if (::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now) != 0) return 0.0;
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}

// "4:cpu,cpuacct:/a/b" lines of /proc/self/cgroup: the path of the v1 cpu controller or of v2 ("0::").
struct CgroupPaths {
  std::optional<std::string> v1_cpu;
  std::optional<std::string> v1_pids;
  std::optional<std::string> v2;
};

CgroupPaths parse_self_cgroup(const std::string& text) {
  CgroupPaths paths;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const auto first = line.find(':');
    const auto second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (line.compare(0, first, "0") == 0 && controllers.empty()) {
      paths.v2 = path;
      continue;
    }
    std::istringstream names(controllers);
    std::string name;
    while (std::getline(names, name, ','))
      if (name == "cpu")
        paths.v1_cpu = path;
      else if (name == "pids")
        paths.v1_pids = path;
  }
  return paths;
}

// `mount`/`path` and each of its parents up to `mount`, deepest first (a container's own cgroup is often
// mounted as the root, so the path from /proc/self/cgroup may not exist below it).
std::vector<fs::path> cgroup_folders(const fs::path& mount, const std::string& path) {
  std::vector<fs::path> folders;
  fs::path relative = fs::path(path).relative_path();
  while (true) {
    folders.push_back(relative.empty() ? mount : mount / relative);
    if (relative.empty()) break;
    relative = relative.parent_path();
  }
  return folders;
}

// The smallest quota on the way up, and the deepest readable cpu.stat.
void read_quota_in(const std::vector<fs::path>& folders, bool v2, CgroupCpu& cgroup) {
  for (const fs::path& folder : folders) {
    std::optional<double> quota;
    fs::path file;
    if (v2) {
      file = folder / "cpu.max";
      if (auto text = read_small_file(file)) quota = parse_cgroup2_cpu_max(*text);
    } else {
      file = folder / "cpu.cfs_quota_us";
      auto quota_text = read_small_file(file);
      auto period_text = read_small_file(folder / "cpu.cfs_period_us");
      if (quota_text && period_text) quota = parse_cgroup1_quota(*quota_text, *period_text);
    }
    if (quota && (!cgroup.quota || *quota < *cgroup.quota)) {
      cgroup.quota = quota;
      cgroup.quota_file = file.string();
    }
    if (cgroup.stat_file.empty()) {
      if (auto text = read_small_file(folder / "cpu.stat"); text && parse_nr_throttled(*text))
        cgroup.stat_file = (folder / "cpu.stat").string();
    }
  }
}

std::optional<std::int64_t> read_nr_throttled(const std::string& stat_file) {
  if (stat_file.empty()) return std::nullopt;
  auto text = read_small_file(stat_file);
  return text ? parse_nr_throttled(*text) : std::nullopt;
}

// Keeps in `tightest` the limit with the least headroom (pids.max - pids.current) on the way up from
// `folders`.
void keep_tightest_task_limit(const std::vector<fs::path>& folders, std::optional<TaskLimit>& tightest) {
  for (const fs::path& folder : folders) {
    const auto max_text = read_small_file(folder / "pids.max");
    const auto current_text = read_small_file(folder / "pids.current");
    if (!max_text || !current_text || max_text->rfind("max", 0) == 0) continue;
    TaskLimit limit{std::atoll(max_text->c_str()), std::atoll(current_text->c_str()),
                    (folder / "pids.max").string()};
    if (limit.max > 0 && (!tightest || limit.spare() < tightest->spare())) tightest = limit;
  }
}

std::optional<double> read_loadavg() {
  auto text = read_small_file("/proc/loadavg");
  return text ? parse_loadavg(*text) : std::nullopt;
}

Json optional_json(const std::optional<double>& value) {
  return value ? Json(*value) : Json(nullptr);
}

double rounded(double value) {
  return std::round(value * 1000.0) / 1000.0;
}

}  // namespace

CpuTimes parse_proc_stat(const std::string& text, const std::vector<int>& cpus) {
  CpuTimes times;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("cpu", 0) != 0 || line.size() < 4 || !std::isdigit(static_cast<unsigned char>(line[3])))
      continue;
    std::istringstream fields(line.substr(3));
    int cpu = -1;
    fields >> cpu;
    if (!cpus.empty() && std::find(cpus.begin(), cpus.end(), cpu) == cpus.end()) continue;
    // user nice system idle iowait irq softirq steal [guest guest_nice]
    std::uint64_t value[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (auto& field : value)
      if (!(fields >> field)) field = 0;
    const std::uint64_t busy = value[0] + value[1] + value[2] + value[5] + value[6] + value[7];
    times.busy += busy;
    times.steal += value[7];
    times.total += busy + value[3] + value[4];
    ++times.cpus;
  }
  if (times.cpus == 0)
    fail(ErrorCategory::invalid_input,
         "/proc/stat: no per-CPU line (cpuN) for this process's CPUs; is /proc mounted?");
  return times;
}

std::optional<double> parse_cgroup2_cpu_max(const std::string& text) {
  std::istringstream fields(text);
  std::string quota;
  double period = 0.0;
  if (!(fields >> quota >> period) || quota == "max" || period <= 0.0) return std::nullopt;
  try {
    const double value = std::stod(quota);
    return value > 0.0 ? std::optional<double>(value / period) : std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<double> parse_cgroup1_quota(const std::string& quota_text, const std::string& period_text) {
  std::istringstream quota_fields(quota_text), period_fields(period_text);
  double quota = -1.0, period = 0.0;
  if (!(quota_fields >> quota) || !(period_fields >> period) || quota <= 0.0 || period <= 0.0)
    return std::nullopt;
  return quota / period;
}

std::optional<double> parse_loadavg(const std::string& text) {
  std::istringstream fields(text);
  double one_minute = 0.0;
  if (!(fields >> one_minute) || one_minute < 0.0) return std::nullopt;
  return one_minute;
}

std::optional<std::int64_t> parse_nr_throttled(const std::string& cpu_stat_text) {
  std::istringstream lines(cpu_stat_text);
  std::string key;
  std::int64_t value = 0;
  while (lines >> key >> value)
    if (key == "nr_throttled") return value;
  return std::nullopt;
}

CgroupCpu read_cgroup_cpu(const std::string& root) {
  CgroupCpu cgroup;
  const fs::path base(root);
  const CgroupPaths paths = parse_self_cgroup(read_small_file(base / "proc/self/cgroup").value_or(""));
  const fs::path mount = base / "sys/fs/cgroup";
  if (paths.v1_cpu) {
    for (const char* name : {"cpu", "cpu,cpuacct", "cpuacct,cpu"})
      if (fs::exists(mount / name)) read_quota_in(cgroup_folders(mount / name, *paths.v1_cpu), false, cgroup);
  }
  if (paths.v2 && fs::exists(mount / "cgroup.controllers"))
    read_quota_in(cgroup_folders(mount, *paths.v2), true, cgroup);
  return cgroup;
}

std::optional<TaskLimit> read_task_limit(const std::string& root) {
  const fs::path base(root);
  const CgroupPaths paths = parse_self_cgroup(read_small_file(base / "proc/self/cgroup").value_or(""));
  const fs::path mount = base / "sys/fs/cgroup";
  std::optional<TaskLimit> tightest;
  if (paths.v1_pids && fs::exists(mount / "pids"))
    keep_tightest_task_limit(cgroup_folders(mount / "pids", *paths.v1_pids), tightest);
  if (paths.v2 && fs::exists(mount / "cgroup.controllers"))
    keep_tightest_task_limit(cgroup_folders(mount, *paths.v2), tightest);
  return tightest;
}

int available_cpus(int affinity_cpus, std::optional<double> quota) {
  int cpus = std::max(1, affinity_cpus);
  if (quota) cpus = std::min(cpus, static_cast<int>(std::ceil(*quota - 1e-9)));
  return std::max(1, cpus);
}

CpuLimits read_cpu_limits() {
  (void)widen_threads_bound_by_openmp();  // else OMP_PROC_BIND leaves this thread one place's CPUs
  CpuLimits limits;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &set)) limits.affinity.push_back(cpu);
  }
  if (limits.affinity.empty()) {
    const long online = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
    for (int cpu = 0; cpu < online; ++cpu)
      limits.affinity.push_back(cpu);
  }
  limits.cgroup = read_cgroup_cpu("/");
  limits.available_cpus = available_cpus(static_cast<int>(limits.affinity.size()), limits.cgroup.quota);
  return limits;
}

LoadSample load_between(const RawLoadReading& first, const RawLoadReading& last) {
  LoadSample sample;
  sample.window_s = std::max(0.0, last.wall_s - first.wall_s);
  sample.cpus = last.times.cpus;
  const double total = static_cast<double>(last.times.total - std::min(last.times.total, first.times.total));
  if (total > 0.0 && sample.cpus > 0) {
    const double busy = static_cast<double>(last.times.busy - std::min(last.times.busy, first.times.busy));
    const double steal =
        static_cast<double>(last.times.steal - std::min(last.times.steal, first.times.steal));
    sample.busy_cpus = rounded(busy / total * sample.cpus);
    sample.steal_cpus = rounded(steal / total * sample.cpus);
  }
  const double own_s = std::max(0.0, last.own_cpu_s - first.own_cpu_s);  // this process's CPU seconds
  if (sample.window_s > 0.0) sample.own_cpus = rounded(own_s / sample.window_s);
  sample.other_cpus = rounded(std::max(0.0, sample.busy_cpus - sample.own_cpus));
  sample.other_cpus_max = sample.other_cpus;
  if (first.own_wait_s && last.own_wait_s && sample.window_s > 0.0 &&
      own_s >= kWaitRatioMinOwnCpus * sample.window_s)
    sample.own_wait_ratio = rounded(std::max(0.0, *last.own_wait_s - *first.own_wait_s) / own_s);
  if (first.nr_throttled && last.nr_throttled)
    sample.throttled_periods = std::max<std::int64_t>(0, *last.nr_throttled - *first.nr_throttled);
  return sample;
}

bool is_busy(const LoadSample& sample) {
  return sample.other_cpus >= kBusyOtherCpus;
}

bool is_contended(const LoadSample& sample) {
  return is_busy(sample) && (!sample.own_wait_ratio || *sample.own_wait_ratio >= kContendedWaitRatio);
}

std::optional<double> parse_schedstat_wait_s(const std::string& text) {
  std::istringstream fields(text);
  std::uint64_t run_ns = 0, wait_ns = 0;
  if (!(fields >> run_ns >> wait_ns)) return std::nullopt;
  return static_cast<double>(wait_ns) * 1e-9;
}

RawLoadReading read_raw_load(const CpuLimits& limits) {
  RawLoadReading reading;
  reading.wall_s = steady_seconds();
  reading.own_cpu_s = process_cpu_seconds();
  reading.own_wait_s = process_run_queue_wait_seconds();
  if (auto text = read_small_file("/proc/stat")) {
    try {
      reading.times = parse_proc_stat(*text, limits.affinity);
    } catch (const Error&) {
      reading.times = CpuTimes{};  // no figure rather than a failed run
    }
  }
  reading.nr_throttled = read_nr_throttled(limits.cgroup.stat_file);
  return reading;
}

LoadSample sample_machine_load(const CpuLimits& limits, std::chrono::milliseconds window) {
  const RawLoadReading first = read_raw_load(limits);
  std::this_thread::sleep_for(window);
  LoadSample sample = load_between(first, read_raw_load(limits));
  sample.loadavg_1m = read_loadavg();
  return sample;
}

Json to_json(const LoadSample& sample) {
  return Json{
      {"loadavg_1m", optional_json(sample.loadavg_1m)},
      {"busy_cpus", sample.busy_cpus},
      {"steal_cpus", sample.steal_cpus},
      {"own_cpus", sample.own_cpus},
      {"other_cpus", sample.other_cpus},
      {"other_cpus_max", sample.other_cpus_max},
      {"throttled_periods", sample.throttled_periods ? Json(*sample.throttled_periods) : Json(nullptr)},
      {"own_wait_ratio", optional_json(sample.own_wait_ratio)},
      {"window_s", rounded(sample.window_s)},
      {"cpus", sample.cpus},
      {"busy", is_busy(sample)}};
}

Json machine_load_json(const LoadSample& before, const LoadSample& during) {
  return Json{{"before", to_json(before)},
              {"during", to_json(during)},
              {"busy", is_busy(before) || is_busy(during)},
              {"rule",
               "busy: other work (all CPU time on this process's CPUs, steal included, minus its own) "
               ">= 0.5 CPU before or during the run"}};
}

MachineState quiet_machine(MachineState machine) {
  machine.busy = false;
  machine.load.other_cpus = 0.0;
  return machine;
}

MachineState read_machine_state() {
  MachineState state;
  state.limits = read_cpu_limits();
  state.load = sample_machine_load(state.limits);
  // IPJ_STATIC_THREADS=1: plan from the CPUs and quota only (thread counts change float summation order, so
  // bit-identical reruns on a machine whose load varies need it, or --threads N); the load is still recorded.
  state.busy = is_busy(state.load) && !static_thread_plans();
  return state;
}

bool static_thread_plans() {
  return environment_switch("IPJ_STATIC_THREADS");
}

LoadSampler::LoadSampler(CpuLimits limits, std::chrono::milliseconds interval,
                         IntervalCallback after_interval)
    : limits_(std::move(limits)), interval_(interval), after_interval_(std::move(after_interval)) {
  first_ = previous_ = read_raw_load(limits_);
  thread_ = std::thread([this] { loop(); });
}

LoadSampler::~LoadSampler() {
  stop();
}

void LoadSampler::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, interval_, [this] { return stopping_; })) {
    const RawLoadReading now = read_raw_load(limits_);
    const LoadSample interval = load_between(previous_, now);
    const double other = interval.other_cpus;
    other_max_ = std::max(other_max_, other);
    recent_other_ = other;
    busy_streak_ = is_contended(interval) ? busy_streak_ + 1 : 0;
    quiet_streak_ = other < kQuietOtherCpus ? quiet_streak_ + 1 : 0;
    previous_ = now;
    if (auto load = read_loadavg()) {
      loadavg_sum_ += *load;
      ++loadavg_count_;
    }
    if (after_interval_) {  // unlocked: stop() may wait meanwhile, and joins after it returns
      lock.unlock();
      after_interval_(busy_streak_.load(), quiet_streak_.load(), other);
      lock.lock();
    }
  }
}

LoadSample LoadSampler::stop() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  const RawLoadReading last = read_raw_load(limits_);
  LoadSample sample = load_between(first_, last);
  sample.other_cpus_max = std::max(other_max_, load_between(previous_, last).other_cpus);
  sample.loadavg_1m =
      loadavg_count_ > 0 ? std::optional<double>(loadavg_sum_ / loadavg_count_) : read_loadavg();
  if (sample.loadavg_1m) sample.loadavg_1m = rounded(*sample.loadavg_1m);
  return sample;
}

}  // namespace ipj::device
