// The CPUs really available and the machine's load: /proc/stat, loadavg and cgroup v1/v2 files parsed from
// fixture text (exact arithmetic), quota lookup in fixture cgroup trees, the thread plan under given
// (CPUs, quota, load), and the background sampler on this process's own work.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "ipj/core/error.hpp"
#include "ipj/device/machine_load.hpp"
#include "ipj/device/openmp_binding.hpp"
#include "ipj/device/task_limit.hpp"
#include "ipj/device/threading.hpp"
#include "support/test_support.hpp"

namespace ipj::device {
namespace {

void write_fixture(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

const char* const kProcStat =
    "cpu  300 10 60 1000 20 0 5 7 0 0\n"
    "cpu0 100 0 20 500 10 0 2 3 0 0\n"
    "cpu1 200 10 40 500 10 0 3 4 0 0\n"
    "intr 12345\n"
    "ctxt 999\n";

TEST(MachineLoad, ProcStatSumsBusyStealAndTotalOverTheChosenCpus) {
  const CpuTimes all = parse_proc_stat(kProcStat);
  EXPECT_EQ(all.cpus, 2);
  EXPECT_EQ(all.busy, 100u + 20 + 2 + 3 + 200 + 10 + 40 + 3 + 4);  // user nice system irq softirq steal
  EXPECT_EQ(all.steal, 7u);
  EXPECT_EQ(all.total, all.busy + 500 + 10 + 500 + 10);  // + idle + iowait
  const CpuTimes second = parse_proc_stat(kProcStat, {1});
  EXPECT_EQ(second.cpus, 1);
  EXPECT_EQ(second.busy, 257u);
  EXPECT_EQ(second.total, 767u);
  EXPECT_THROW(parse_proc_stat(kProcStat, {5}), Error);
  EXPECT_THROW(parse_proc_stat("intr 1\n"), Error);
}

TEST(MachineLoad, LoadBetweenTwoReadingsIsExact) {
  RawLoadReading first, last;
  first.times = {100, 10, 1000, 2};
  last.times = {200, 30, 1200, 2};  // +100 busy of +200 total on 2 CPUs = 1 CPU; +20 steal = 0.2 CPU
  first.wall_s = 10.0;
  last.wall_s = 11.0;
  first.own_cpu_s = 5.0;
  last.own_cpu_s = 5.25;  // 0.25 CPU ours
  first.nr_throttled = 4;
  last.nr_throttled = 9;
  const LoadSample sample = load_between(first, last);
  EXPECT_DOUBLE_EQ(sample.busy_cpus, 1.0);
  EXPECT_DOUBLE_EQ(sample.steal_cpus, 0.2);
  EXPECT_DOUBLE_EQ(sample.own_cpus, 0.25);
  EXPECT_DOUBLE_EQ(sample.other_cpus, 0.75);
  EXPECT_DOUBLE_EQ(sample.window_s, 1.0);
  EXPECT_EQ(sample.throttled_periods, 5);
  EXPECT_TRUE(is_busy(sample));
  last.own_cpu_s = 5.6;  // 0.6 ours: 0.4 other, under the 0.5 rule
  EXPECT_FALSE(is_busy(load_between(first, last)));
  last.own_cpu_s = 7.0;  // more than the CPUs' busy time (clock skew): other is never negative
  EXPECT_DOUBLE_EQ(load_between(first, last).other_cpus, 0.0);
  const Json json = to_json(sample);
  for (const char* key :
       {"loadavg_1m", "busy_cpus", "steal_cpus", "own_cpus", "other_cpus", "throttled_periods"})
    EXPECT_TRUE(json.contains(key)) << key;
  const Json record = machine_load_json(load_between(first, first), sample);
  EXPECT_TRUE(record["busy"].get<bool>());
  EXPECT_FALSE(record["before"]["busy"].get<bool>());
}

// Other work makes a mid-run re-plan shrink only while this process's threads wait for CPUs (a closed-loop
// client beside a server runs while the server waits for it); where the wait is unknown, or the process
// hardly ran, the other work alone decides.
TEST(MachineLoad, ContendedIsBusyWithOurThreadsWaitingForCpus) {
  EXPECT_DOUBLE_EQ(*parse_schedstat_wait_s("4734279 4500000000 12\n"), 4.5);
  EXPECT_FALSE(parse_schedstat_wait_s("4734279\n"));
  EXPECT_FALSE(parse_schedstat_wait_s("garbage"));
  RawLoadReading first, last;
  first.times = {100, 0, 1000, 2};
  last.times = {250, 0, 1200, 2};  // 1.5 CPUs busy in 1 s
  first.wall_s = 10.0;
  last.wall_s = 11.0;
  first.own_cpu_s = 5.0;
  last.own_cpu_s = 5.5;  // 0.5 ours, 1.0 other
  first.own_wait_s = 2.0;
  last.own_wait_s = 2.1;  // waited 0.1 s for 0.5 s run: 0.2
  LoadSample sample = load_between(first, last);
  EXPECT_DOUBLE_EQ(*sample.own_wait_ratio, 0.2);
  EXPECT_TRUE(is_busy(sample));
  EXPECT_FALSE(is_contended(sample));
  EXPECT_EQ(to_json(sample)["own_wait_ratio"], 0.2);
  last.own_wait_s = 2.0 + 0.5 * kContendedWaitRatio;  // exactly at the threshold
  EXPECT_TRUE(is_contended(load_between(first, last)));
  last.own_wait_s = 1.0;  // a thread that exited took its wait with it: never negative
  EXPECT_DOUBLE_EQ(*load_between(first, last).own_wait_ratio, 0.0);
  last.own_wait_s.reset();  // unreadable: the other work decides
  sample = load_between(first, last);
  EXPECT_FALSE(sample.own_wait_ratio);
  EXPECT_TRUE(is_contended(sample));
  EXPECT_TRUE(to_json(sample)["own_wait_ratio"].is_null());
  last.own_wait_s = 2.1;
  last.own_cpu_s = 5.0 + 0.5 * kWaitRatioMinOwnCpus;  // hardly ran: no ratio, busy decides
  sample = load_between(first, last);
  EXPECT_FALSE(sample.own_wait_ratio);
  EXPECT_TRUE(is_contended(sample));
  last.times = {150, 0, 1200, 2};  // 0.5 busy: quiet whatever the wait
  last.own_cpu_s = 5.5;
  last.own_wait_s = 3.0;
  EXPECT_FALSE(is_contended(load_between(first, last)));
  // this process's own reading: its threads' schedstat files (Linux with schedstats)
  const RawLoadReading own = read_raw_load(read_cpu_limits());
  if (own.own_wait_s) {
    EXPECT_GE(*own.own_wait_s, 0.0);
  }
}

TEST(MachineLoad, CgroupAndLoadavgFilesParse) {
  EXPECT_FALSE(parse_cgroup2_cpu_max("max 100000\n"));
  EXPECT_DOUBLE_EQ(*parse_cgroup2_cpu_max("150000 100000\n"), 1.5);
  EXPECT_FALSE(parse_cgroup2_cpu_max("garbage"));
  EXPECT_FALSE(parse_cgroup1_quota("-1\n", "100000\n"));
  EXPECT_DOUBLE_EQ(*parse_cgroup1_quota("50000\n", "100000\n"), 0.5);
  EXPECT_FALSE(parse_cgroup1_quota("50000", "0"));
  EXPECT_DOUBLE_EQ(*parse_loadavg("1.25 0.80 0.40 2/345 6789\n"), 1.25);
  EXPECT_FALSE(parse_loadavg(""));
  EXPECT_EQ(parse_nr_throttled("nr_periods 10\nnr_throttled 3\nthrottled_time 100\n"), 3);
  EXPECT_FALSE(parse_nr_throttled("usage_usec 5\n"));
  EXPECT_EQ(available_cpus(4, 1.5), 2);  // ceil(quota)
  EXPECT_EQ(available_cpus(2, std::nullopt), 2);
  EXPECT_EQ(available_cpus(8, 0.2), 1);
  EXPECT_EQ(available_cpus(2, 3.0), 2);  // the affinity caps it
}

TEST(MachineLoad, CgroupV1QuotaIsTheSmallestOnThePathAndStatIsFound) {
  testing::TempDir root;
  write_fixture(root.file("proc/self/cgroup"), "5:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n");
  const std::string mount = root.file("sys/fs/cgroup/cpu,cpuacct");
  write_fixture(mount + "/docker/abc/cpu.cfs_quota_us", "150000\n");
  write_fixture(mount + "/docker/abc/cpu.cfs_period_us", "100000\n");
  write_fixture(mount + "/docker/abc/cpu.stat", "nr_periods 20\nnr_throttled 7\nthrottled_time 1\n");
  write_fixture(mount + "/docker/cpu.cfs_quota_us", "300000\n");
  write_fixture(mount + "/docker/cpu.cfs_period_us", "100000\n");
  write_fixture(mount + "/cpu.cfs_quota_us", "-1\n");
  write_fixture(mount + "/cpu.cfs_period_us", "100000\n");
  const CgroupCpu cgroup = read_cgroup_cpu(root.path());
  ASSERT_TRUE(cgroup.quota);
  EXPECT_DOUBLE_EQ(*cgroup.quota, 1.5);
  EXPECT_EQ(cgroup.quota_file, mount + "/docker/abc/cpu.cfs_quota_us");
  EXPECT_EQ(cgroup.stat_file, mount + "/docker/abc/cpu.stat");
}

TEST(MachineLoad, CgroupV2QuotaInTheOwnFolderOrAtAContainersRoot) {
  testing::TempDir pod;
  write_fixture(pod.file("proc/self/cgroup"), "0::/kubepods/pod1\n");
  write_fixture(pod.file("sys/fs/cgroup/cgroup.controllers"), "cpu memory\n");
  write_fixture(pod.file("sys/fs/cgroup/cpu.max"), "max 100000\n");
  write_fixture(pod.file("sys/fs/cgroup/kubepods/pod1/cpu.max"), "200000 100000\n");
  EXPECT_DOUBLE_EQ(*read_cgroup_cpu(pod.path()).quota, 2.0);
  // A container sees its own cgroup as the root: the path from /proc/self/cgroup is not below the mount.
  testing::TempDir container;
  write_fixture(container.file("proc/self/cgroup"), "0::/system.slice/docker-1.scope\n");
  write_fixture(container.file("sys/fs/cgroup/cgroup.controllers"), "cpu\n");
  write_fixture(container.file("sys/fs/cgroup/cpu.max"), "100000 100000\n");
  write_fixture(container.file("sys/fs/cgroup/cpu.stat"), "usage_usec 1\nnr_throttled 2\n");
  const CgroupCpu cgroup = read_cgroup_cpu(container.path());
  EXPECT_DOUBLE_EQ(*cgroup.quota, 1.0);
  EXPECT_EQ(cgroup.stat_file, container.file("sys/fs/cgroup/cpu.stat"));
  testing::TempDir none;  // no cgroup files at all
  EXPECT_FALSE(read_cgroup_cpu(none.path()).quota);
}

MachineState machine_with(int cpus, std::optional<double> quota, double other_cpus) {
  MachineState machine;
  for (int cpu = 0; cpu < cpus; ++cpu)
    machine.limits.affinity.push_back(cpu);
  machine.limits.cgroup.quota = quota;
  machine.limits.available_cpus = available_cpus(cpus, quota);
  machine.load.other_cpus = other_cpus;
  machine.busy = is_busy(machine.load);
  return machine;
}

TEST(MachineThreadPlans, QuietMachineGetsEveryAvailableCpuAndBusyOneLeavesTheNeighboursCpus) {
  const ThreadPlan quiet =
      plan_for_machine(ThreadPlanChoice::tuned, ThreadWorkload::onednn, 0, machine_with(4, {}, 0.1));
  EXPECT_EQ(quiet.torch_threads, 4);
  EXPECT_EQ(quiet.blas_threads, 1);
  EXPECT_EQ(quiet.available_cpus, 4);
  EXPECT_FALSE(quiet.quota);
  EXPECT_EQ(quiet.plan, "tuned");
  const ThreadPlan busy =
      plan_for_machine(ThreadPlanChoice::tuned, ThreadWorkload::onednn, 0, machine_with(4, {}, 1.0));
  EXPECT_EQ(busy.torch_threads, 3);
  EXPECT_NE(busy.reason.find("busy"), std::string::npos) << busy.reason;
  // Two cores and a hog: one thread per pool.
  const ThreadPlan two =
      plan_for_machine(ThreadPlanChoice::tuned, ThreadWorkload::onednn, 0, machine_with(2, {}, 0.6));
  EXPECT_EQ(two.torch_threads, 1);
  EXPECT_EQ(two.blas_threads, 1);
  const ThreadPlan gemm =
      plan_for_machine(ThreadPlanChoice::tuned, ThreadWorkload::fp32_gemm, 0, machine_with(2, {}, 1.8));
  EXPECT_EQ(gemm.torch_threads, 1);
  EXPECT_EQ(gemm.blas_threads, 1);  // never below one
  // what bench times its XNNPACK runtimes and batch-1 pool on: the same CPUs
  EXPECT_EQ(usable_cpus(machine_with(4, {}, 0.1)), 4);
  EXPECT_EQ(usable_cpus(machine_with(4, {}, 1.0)), 3);
  EXPECT_EQ(usable_cpus(machine_with(2, {}, 0.6)), 1);
  EXPECT_EQ(usable_cpus(machine_with(2, {}, 1.8)), 1);
  EXPECT_EQ(usable_cpus(machine_with(8, 1.5, 0.0)), 2);
}

TEST(MachineThreadPlans, QuotaCapsThePlanAndExplicitThreadsOrPythonPlanAreKept) {
  const ThreadPlan quota =
      plan_for_machine(ThreadPlanChoice::tuned, ThreadWorkload::fp32_gemm, 0, machine_with(8, 1.5, 0.0));
  EXPECT_EQ(quota.blas_threads, 2);
  EXPECT_EQ(quota.available_cpus, 2);
  EXPECT_DOUBLE_EQ(*quota.quota, 1.5);
  EXPECT_NE(quota.reason.find("quota 1.5"), std::string::npos) << quota.reason;
  const ThreadPlan given =
      plan_for_machine(ThreadPlanChoice::tuned, ThreadWorkload::onednn, 3, machine_with(2, {}, 1.0));
  EXPECT_EQ(given.torch_threads, 3);  // --threads is taken as given
  const ThreadPlan python =
      plan_for_machine(ThreadPlanChoice::python, ThreadWorkload::onednn, 4, machine_with(4, {}, 2.0));
  EXPECT_EQ(python.plan, "python");
  EXPECT_EQ(python.torch_threads, 1);
  EXPECT_EQ(python.blas_threads, 4);
  const Json json = to_json(quota);
  for (const char* key : {"plan", "reason", "available_cpus", "quota", "torch", "blas"})
    EXPECT_TRUE(json.contains(key)) << key;
  EXPECT_TRUE(to_json(python)["quota"].is_null());
}

// OMP_PROC_BIND leaves the main thread one place; its threads widen to every place's CPU, never beyond them.
TEST(OpenMpBinding, BoundThreadsWidenToTheUnionOfThePlacesOnly) {
  EXPECT_EQ(cpus_to_widen_to({0}, {{0}, {1}, {2, 3}}), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(cpus_to_widen_to({4, 5}, {{4, 5}, {6, 7}}), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_TRUE(cpus_to_widen_to({0, 1}, {{0}, {1}}).empty());  // already on every place
  EXPECT_TRUE(cpus_to_widen_to({0, 1, 2}, {{1}}).empty());    // the places name fewer CPUs: the user's limit
  EXPECT_TRUE(cpus_to_widen_to({0}, {}).empty());             // binding off: no places
  EXPECT_EQ(cpu_list_text({3, 0, 1, 2, 6, 8, 9, 6}), "0-3,6,8-9");
  EXPECT_EQ(cpu_list_text({5}), "5");
  EXPECT_EQ(cpu_list_text({}), "");
}

TEST(MachineLoad, SamplerSeesThisProcesssOwnWork) {
  const CpuLimits limits = read_cpu_limits();
  EXPECT_GE(limits.available_cpus, 1);
  EXPECT_FALSE(limits.affinity.empty());
  LoadSampler sampler(limits, std::chrono::milliseconds(100));
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(600);
  volatile double sink = 0.0;
  while (std::chrono::steady_clock::now() < until)
    for (int i = 0; i < 10000; ++i)
      sink = sink + i * 0.5;
  const LoadSample during = sampler.stop();
  EXPECT_GE(during.window_s, 0.55);
  EXPECT_GT(during.own_cpus, 0.2);  // a busy loop on a shared machine: some of a CPU, surely
  EXPECT_GE(during.busy_cpus, 0.0);
  EXPECT_GE(during.other_cpus_max, during.other_cpus - 1e-9);
  EXPECT_TRUE(during.loadavg_1m.has_value());
}

// The callback after each interval (an idle server's re-plan) gets the streaks as the sampler keeps them,
// on the sampler's thread, and none comes after stop().
TEST(MachineLoad, SamplerCallsBackAfterEachIntervalWithItsStreaks) {
  std::atomic<int> calls{0}, streak_steps{0}, last_quiet{-1};
  LoadSampler sampler(
      read_cpu_limits(), std::chrono::milliseconds(20), [&](int busy, int quiet, double other) {
        // each interval either extends the quiet streak by one or ends it
        const int previous = last_quiet.exchange(quiet);
        if (busy >= 0 && other >= 0.0 && (quiet == 0 || previous < 0 || quiet == previous + 1))
          streak_steps += 1;
        calls += 1;
      });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  sampler.stop();
  const int after_stop = calls.load();
  EXPECT_GE(after_stop, 3);
  EXPECT_EQ(streak_steps.load(), after_stop);
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_EQ(calls.load(), after_stop);
}

// Without /proc LibTorch's thread pool cannot start (exit 70 "enforce fail at ThreadPool.cc" before): the
// check names the missing tree and how to mount it; a tree that has both files passes.
TEST(ProcCheck, AMissingProcTreeIsNamedWithTheFix) {
  testing::TempDir dir;
  try {
    check_proc_is_mounted(dir.path());
    ADD_FAILURE() << "an empty folder passed as /proc";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::unsupported);
    EXPECT_NE(std::string(error.what()).find(dir.path() + " is not mounted"), std::string::npos)
        << error.what();
    EXPECT_NE(std::string(error.what()).find("mount -t proc proc /proc"), std::string::npos) << error.what();
  }
  std::filesystem::create_directories(dir.file("self"));
  std::ofstream(dir.file("self/stat")) << "1 (x) R";
  std::ofstream(dir.file("cpuinfo")) << "processor : 0";
  EXPECT_NO_THROW(check_proc_is_mounted(dir.path()));
  EXPECT_NO_THROW(check_proc_is_mounted());  // this machine's
}

}  // namespace
}  // namespace ipj::device
