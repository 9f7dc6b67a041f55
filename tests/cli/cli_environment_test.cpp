// The `ipj` binary in the environments users run it in: ipj's own variables, shared run folders, full disks,
// unwritable or closed stdout, the dynamic loader, cgroup task limits, OpenMP stack sizes, no /proc.
#include <gtest/gtest.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/test_support.hpp"

namespace ipj {
namespace {

using nlohmann::json;
using testing::ipj;

const std::string kQuickTrain =
    " train --model mlp --limit 200 --test-limit 50 --epochs 1 --no-energy --no-save --quiet --json";

// Before 12-08 IPJ_NO_REEXEC=yes and IPJ_STATIC_THREADS=maybe were ignored without a word, IPJ_CPU_TDP_W=abc
// ran the default estimate and IPJ_WAIT_POLICY=PASSIVE was refused while IPJ_LOG_LEVEL=DEBUG was read.
TEST(CliEnvironment, IpjsOwnVariablesAreReadAlikeAndABadValueIsNamed) {
  const std::string unset = "env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u OPENBLAS_THREAD_TIMEOUT ";
  for (const std::string bad : {"IPJ_NO_REEXEC=maybe", "IPJ_STATIC_THREADS=sometimes", "IPJ_CPU_TDP_W=abc",
                                "IPJ_CPU_TDP_W=-5", "IPJ_WAIT_POLICY=fast", "IPJ_LOG_LEVEL=loud"}) {
    const std::string name = bad.substr(0, bad.find('='));
    const std::string value = bad.substr(bad.find('=') + 1);
    testing::expect_cli_failure(testing::run_process(unset + bad + " " + testing::ipj_binary() + " devices"),
                                2, name + "='" + value + "' is not");
  }
  const auto train = [&](const std::string& environment) {
    const auto result = testing::run_process(unset + environment + " " + testing::ipj_binary() + kQuickTrain);
    EXPECT_EQ(result.exit_code, 0) << result.err;
    return result.exit_code == 0 ? json::parse(result.out)["threads"] : json::object();
  };
  EXPECT_EQ(train("IPJ_WAIT_POLICY=PASSIVE")["omp_wait_policy"], "PASSIVE (set by ipj)");
  EXPECT_EQ(train("IPJ_NO_REEXEC=yes")["wait_policy_reason"], "IPJ_NO_REEXEC=yes: libgomp's own default");
  EXPECT_EQ(train("IPJ_NO_REEXEC=off IPJ_WAIT_POLICY=passive")["omp_wait_policy"], "PASSIVE (set by ipj)");
  // The estimate's power comes from IPJ_CPU_TDP_W when it is a number
  const auto measured =
      testing::run_process("IPJ_CPU_TDP_W=1000 " + testing::ipj_binary() + " measure --json -- sleep 0.1");
  ASSERT_EQ(measured.exit_code, 0) << measured.err;
  EXPECT_NE(json::parse(measured.out)["devices"][0]["model"].get<std::string>().find("(TDP 1000.0 W"),
            std::string::npos)
      << measured.out;
}

// Two runs started in the same second without --out shared runs/<model>-<time> and the second's files
// replaced the first's. The folder is made when its name is chosen now: a taken name gets "-2"; a run that
// fails before writing leaves no empty folder behind.
TEST(CliEnvironment, RunsStartedInTheSameSecondGetTheirOwnFolders) {
  testing::TempDir dir;
  const std::time_t now = std::time(nullptr);
  std::vector<std::string> taken;
  for (std::time_t second = now; second <= now + 30; ++second) {  // every name the run could choose
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&second));
    taken.push_back(dir.file(std::string("runs/mlp-") + stamp));
    std::filesystem::create_directories(taken.back());
    std::ofstream(taken.back() + "/results.json") << "{\"another\": \"run\"}";
  }
  const std::string train =
      "cd " + dir.path() + " && " + testing::ipj_binary() +
      " train --model mlp --limit 200 --test-limit 50 --epochs 1 --no-energy --quiet --json";
  const auto result = testing::run_process(train);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const std::string out = json::parse(result.out)["config"]["out"];
  EXPECT_EQ(out.substr(out.size() - 2), "-2") << out;
  EXPECT_TRUE(std::filesystem::exists(dir.file(out + "/results.json"))) << out;
  for (const std::string& folder : taken)
    EXPECT_EQ(read_file(folder + "/results.json"), "{\"another\": \"run\"}") << folder;
  const auto failed = testing::run_process(train + " --data /no/such/folder");
  EXPECT_EQ(failed.exit_code, 4) << failed.err;
  std::size_t folders = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir.file("runs")))
    ++folders;
  EXPECT_EQ(folders, taken.size() + 1);  // the failed run's folder was removed
}

// LibTorch's zip writer throws from its destructor when the disk fills: the run aborted ("terminate called
// ...", a crash report asking for a bug report) and left a half-written checkpoint.pt.tmp taking the space.
// A file-size limit (ulimit -f; SIGXFSZ ignored, as a full disk gives no signal) fails the same writes.
TEST(CliEnvironment, AFullDiskEndsARunWithAnIoErrorAndNoTemporaryLeft) {
  testing::TempDir dir;
  const auto run =
      testing::run_process("bash -c 'trap \"\" XFSZ; ulimit -f 2048; exec " + testing::ipj_binary() +
                           " train --model mlp --limit 200 --test-limit 50 --epochs 1 --no-energy "
                           "--quiet --out " +
                           dir.file("run") + "'");
  EXPECT_EQ(run.exit_code, 4) << run.err;  // 134: the abort
  EXPECT_NE(run.err.find("cannot write '" + dir.file("run") + "/checkpoint.pt'"), std::string::npos)
      << run.err;
  EXPECT_EQ(run.err.find("crashed"), std::string::npos) << run.err;
  for (const auto& entry : std::filesystem::directory_iterator(dir.file("run")))
    EXPECT_EQ(entry.path().filename().string().find(".tmp"), std::string::npos) << entry.path();
}

// stdout on a full disk (or /dev/full) lost the JSON object while the run exited 0.
TEST(CliEnvironment, AStdoutThatCannotBeWrittenFailsTheRun) {
  // (inside a shell of its own: run_process sends the command's stdout to its own file after it)
  const auto full =
      testing::run_process("sh -c 'exec " + testing::ipj_binary() +
                           " train --model mlp --limit 200 --test-limit 50 --epochs 1 --no-energy "
                           "--no-save --quiet --json > /dev/full'");
  testing::expect_cli_failure(full, 4, "cannot write standard output");
  const auto devices =
      testing::run_process("sh -c 'exec " + testing::ipj_binary() + " devices --json > /dev/full'");
  testing::expect_cli_failure(devices, 4, "cannot write standard output");
}

// `ld-linux-x86-64.so.2 ipj train ...` (how some launchers start programs): /proc/self/exe is the loader, and
// the wait policy's second start ran the loader with ipj's arguments: exit 127 and nothing printed.
TEST(CliEnvironment, StartedThroughTheDynamicLoaderARunRunsOnceAndSaysSo) {
  const std::string loader = "/lib64/ld-linux-x86-64.so.2";
  if (!std::filesystem::exists(loader)) GTEST_SKIP() << "no " << loader << " on this machine";
  const auto run = testing::run_process(
      "env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT " + loader + " " + testing::ipj_binary() +
      " train --model mlp --limit 200 --test-limit 50 --epochs 1 --no-energy "
      "--no-save --quiet --json");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(json::parse(run.out)["threads"]["wait_policy_reason"].get<std::string>().find("dynamic loader"),
            std::string::npos)
      << run.out;
}

// A cgroup task limit (docker --pids-limit) with one task to spare hung the run for ever in LibTorch's
// thread-pool start; now it stops at once naming the limit, and a thread refused later names it too.
// Needs a writable cgroup v1 pids controller (root); skipped elsewhere.
TEST(CliEnvironment, ACgroupTaskLimitStopsARunNamingItInsteadOfAHang) {
  const std::string group = "/sys/fs/cgroup/pids/ipj-test-" + std::to_string(::getpid());
  if (::access("/sys/fs/cgroup/pids", W_OK) != 0 || !std::filesystem::create_directory(group))
    GTEST_SKIP() << "no writable cgroup v1 pids controller here";
  std::ofstream(group + "/pids.max") << 3;
  const auto run = testing::run_process(
      "sh -c 'echo $$ > " + group + "/cgroup.procs && exec timeout 60 " + testing::ipj_binary() +
      " train --model mlp --limit 200 --test-limit 50 --epochs 1 --no-energy "
      "--no-save --quiet --json'");
  std::filesystem::remove(group);
  testing::expect_cli_failure(run, 6, "the cgroup's task limit is 3");  // 124: the hang
}

// A closed stdout (`ipj ... >&-`) read as /dev/null: the JSON object vanished and the run exited 0.
TEST(CliEnvironment, AClosedStdoutFailsTheRunInsteadOfDroppingItsOutput) {
  const auto closed = testing::run_process("sh -c 'exec " + testing::ipj_binary() + " devices --json >&-'");
  testing::expect_cli_failure(closed, 4, "was closed when ipj started");
}

// OMP_STACKSIZE larger than the system gives a thread: libgomp printed "Thread creation failed" and exited 1
// at the first two-thread region. The run now plans one OpenMP thread and says why.
TEST(CliEnvironment, AnOpenMpStackThatCannotStartRunsOnOneThreadAndSaysSo) {
  const auto run =
      testing::run_process("timeout 300 env OMP_STACKSIZE=4000000G " + testing::ipj_binary() + kQuickTrain);
  ASSERT_EQ(run.exit_code, 0) << run.err;  // 1: libgomp's exit
  const json threads = json::parse(run.out)["threads"];
  EXPECT_EQ(threads["torch"], 1) << threads;
  EXPECT_NE(threads["reason"].get<std::string>().find(
                "OMP_STACKSIZE=4000000G: a thread with that stack cannot start here"),
            std::string::npos)
      << threads;
  // A size that fits changes nothing
  const auto fits = testing::run_process("env OMP_STACKSIZE=16M " + testing::ipj_binary() + kQuickTrain);
  ASSERT_EQ(fits.exit_code, 0) << fits.err;
  EXPECT_EQ(json::parse(fits.out)["threads"]["reason"].get<std::string>().find("OMP_STACKSIZE"),
            std::string::npos);
}

// Without /proc (a container runtime that removes it) LibTorch's thread pool failed an internal check: exit
// 70 "internal error: [enforce fail at ThreadPool.cc:44]". Needs a private mount namespace (root); skipped
// elsewhere.
TEST(CliEnvironment, WithoutProcARunStopsNamingIt) {
  if (testing::run_process("unshare -m true").exit_code != 0)
    GTEST_SKIP() << "cannot make a mount namespace here";
  const auto run = testing::run_process("unshare -m sh -c 'umount -l /proc && exec timeout 120 " +
                                        testing::ipj_binary() + kQuickTrain + "'");
  testing::expect_cli_failure(run, 5, "/proc is not mounted");
}

}  // namespace
}  // namespace ipj
