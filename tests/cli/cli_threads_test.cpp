// The `ipj` binary in the environments users run it in: thread plans and why, OpenMP settings and binding,
// the wait policy's second start, address-space and file-size limits, full disks, shared run folders.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "ipj/core/atomic_file.hpp"
#include "ipj/device/address_space_limit.hpp"
#include "support/test_support.hpp"

namespace ipj {
namespace {

using nlohmann::json;
using testing::ipj;

TEST(CliThreads, TrainAndBenchSayWhichPlanRanWhyAndHowBusyTheMachineWas) {
  testing::TempDir dir;
  testing::write_synthetic_idx_dataset(dir.file("data"), 200, 50, false);
  const auto trained = ipj("train --model mlp --epochs 1 --batch 50 --quiet --no-energy --json --data " +
                           dir.file("data") + " --out " + dir.file("run"));
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  const json results = json::parse(read_file(dir.file("run/results.json")));
  const json& threads = results["threads"];
  EXPECT_EQ(threads["plan"], "tuned");
  EXPECT_GE(threads["available_cpus"].get<int>(), 1);
  EXPECT_TRUE(threads["quota"].is_null() || threads["quota"].is_number());
  EXPECT_NE(threads["reason"].get<std::string>().find("CPU(s) available"), std::string::npos);
  EXPECT_GE(threads["torch"].get<int>(), 1);  // the keys older readers use stay
  EXPECT_GE(threads["blas"].get<int>(), 1);
  for (const char* key : {"before", "during", "busy"})
    EXPECT_TRUE(results["machine_load"].contains(key)) << key;
  EXPECT_GT(results["machine_load"]["during"]["window_s"].get<double>(), 0.0);

  const std::string bench =
      "bench --model " + dir.file("run") +
      " --variants fp32 --batch 2 --window-s 0.01 --warmup-s 0 --max-windows 1 --no-accuracy "
      "--no-energy --quiet --json";
  const auto tuned = ipj(bench);
  ASSERT_EQ(tuned.exit_code, 0) << tuned.err;
  const json report = json::parse(tuned.out);
  EXPECT_EQ(report["threads"]["plan"], "tuned");
  EXPECT_TRUE(report["machine_load"]["busy"].is_boolean());
  EXPECT_TRUE(report["machine_load"]["before"].contains("other_cpus"));
  const auto python = ipj(bench + " --thread-plan python");
  ASSERT_EQ(python.exit_code, 0) << python.err;
  EXPECT_EQ(json::parse(python.out)["threads"]["plan"], "python");
  EXPECT_EQ(json::parse(python.out)["threads"]["torch"], 1);
  testing::expect_cli_failure(ipj(bench + " --thread-plan fastest"), 2, "--thread-plan");
}

// OpenMP settings under which libgomp hands a parallel region fewer threads than omp_get_max_threads() says
// (OMP_THREAD_LIMIT, OMP_DYNAMIC=true, OMP_MAX_ACTIVE_LEVELS=0): LibTorch's oneDNN kernels split their work
// for the count asked, so before ipj capped its plan a cnn's training hung in convolution_backward, an mlp
// trained to NaN and static int8 answered 0.15 where it answers 0.66 (a hostile pass, 2026-12-07). Now the
// plan is capped, results say why, and the answers are those of a one-thread run.
TEST(CliThreads, OpenMpSettingsThatShrinkTheTeamCapThePlanInsteadOfBreakingKernels) {
  testing::TempDir dir;
  const std::string train =
      " train --model cnn --limit 1000 --test-limit 300 --epochs 1 --lr 0.05 --no-energy "
      "--quiet --json --out ";
  const auto one_thread = ipj(train + dir.file("one") + " --threads 1");
  ASSERT_EQ(one_thread.exit_code, 0) << one_thread.err;
  const auto limited = testing::run_process("timeout 300 env OMP_THREAD_LIMIT=1 " + testing::ipj_binary() +
                                            train + dir.file("lim"));
  ASSERT_EQ(limited.exit_code, 0) << limited.err;  // 124: the hang is back
  const json capped = json::parse(limited.out);
  EXPECT_EQ(capped["threads"]["torch"], 1);
  const bool lowered = capped["threads"]["available_cpus"].get<int>() > 1;
  EXPECT_EQ(capped["threads"]["reason"].get<std::string>().find("OMP_THREAD_LIMIT=1: OpenMP capped at 1") !=
                std::string::npos,
            lowered)
      << capped["threads"];
  EXPECT_EQ(limited.err.find("OMP_THREAD_LIMIT=1") != std::string::npos, lowered) << limited.err;
  EXPECT_NEAR(capped["final"]["test_acc"].get<double>(),
              json::parse(one_thread.out)["final"]["test_acc"].get<double>(), 0.01);

  const std::string bench = " bench --model " + dir.file("one") +
                            " --variants int8-static --batch 8 --window-s 0.02 --max-windows 2 --no-energy "
                            "--test-limit 300 --quiet --json";
  const auto plain = ipj(bench);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const auto dynamic =
      testing::run_process("timeout 300 env OMP_DYNAMIC=true " + testing::ipj_binary() + bench);
  ASSERT_EQ(dynamic.exit_code, 0) << dynamic.err;
  EXPECT_NEAR(json::parse(dynamic.out)["rows"][0]["test_acc"].get<double>(),
              json::parse(plain.out)["rows"][0]["test_acc"].get<double>(), 0.02);
}

// OMP_PROC_BIND (HPC guides recommend it) makes libgomp pin the main thread to OpenMP place 0 at load, and
// every thread started after it inherits that: before ipj widened them, OMP_PROC_BIND=true OMP_PLACES=cores
// gave "1 CPU(s) available" on a 2-CPU machine and the mlp trained at the one-CPU speed (46k vs 77k
// samples/s). Binding that names fewer CPUs (taskset, GOMP_CPU_AFFINITY) is the user's limit and stays.
TEST(CliThreads, OpenMpBindingDoesNotShrinkTheMachineToOnePlace) {
  const std::string train =
      " train --model mlp --limit 500 --test-limit 100 --epochs 1 --no-energy --no-save --quiet --json";
  const auto threads_under = [&](const std::string& environment) {
    const auto result =
        testing::run_process("timeout 300 " + environment + " " + testing::ipj_binary() + train);
    EXPECT_EQ(result.exit_code, 0) << result.err;
    return result.exit_code == 0 ? json::parse(result.out)["threads"] : json{{"available_cpus", 0}};
  };
  const int unbound = threads_under("env")["available_cpus"];
  const std::vector<std::pair<std::string, std::string>> bindings = {
      {"OMP_PROC_BIND=true OMP_PLACES=cores", "OMP_PROC_BIND=true (libgomp's places {"},
      {"OMP_PROC_BIND=spread OMP_PLACES=threads", "OMP_PROC_BIND=spread (libgomp's places {"},
      {"OMP_PLACES=threads", "OMP_PLACES=threads (libgomp's places {"}};  // binding without OMP_PROC_BIND
  for (const auto& [binding, named] : bindings) {
    const json bound = threads_under("env -u OMP_PROC_BIND " + binding);
    EXPECT_EQ(bound["available_cpus"], unbound) << binding << ": " << bound;
    const std::string reason = bound.value("reason", "");
    EXPECT_EQ(reason.find(named) != std::string::npos && reason.find("ipj moved") != std::string::npos,
              unbound > 1)
        << bound;
  }
  const json one_place = threads_under("env GOMP_CPU_AFFINITY=0");
  EXPECT_EQ(one_place["available_cpus"], 1) << one_place;
  EXPECT_EQ(one_place.value("reason", "").find("ipj moved"), std::string::npos) << one_place;
  if (unbound > 1) {  // the cause of the one CPU is named
    EXPECT_NE(one_place.value("reason", "")
                  .find("GOMP_CPU_AFFINITY=0 (libgomp's places {0}) keeps ipj on CPU(s) 0"),
              std::string::npos)
        << one_place;
  }
}

// libgomp warns about an OpenMP setting it cannot read while it loads, before main(); ipj's second start (the
// wait policy's) loaded it again and the user read each warning twice. The second start's load is silent now,
// and what ipj itself says after it still shows.
TEST(CliThreads, TheLibrariesLoadTimeWarningsShowOnce) {
  const std::string environment = "timeout 300 env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT OMP_PLACES=nonsense ";
  const auto count = [](const std::string& text, const std::string& what) {
    std::size_t found = 0;
    for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
      ++found;
    return found;
  };
  const auto trained = testing::run_process(
      environment + testing::ipj_binary() +
      " train --model mlp --limit 300 --test-limit 100 --epochs 1 --no-energy --no-save --quiet --json");
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  const json threads = json::parse(trained.out)["threads"];
  ASSERT_NE(threads.value("omp_wait_policy", "").find("set by ipj"), std::string::npos)
      << threads;  // the second start ran
  EXPECT_EQ(count(trained.err, "libgomp: "), 1U) << trained.err;
  EXPECT_EQ(count(trained.err, "OMP_PLACES"), 1U) << trained.err;

  const auto failed = testing::run_process(environment + testing::ipj_binary() +
                                           " train --model mlp --data /no/such/folder --no-energy --quiet");
  EXPECT_NE(failed.exit_code, 0);
  EXPECT_EQ(count(failed.err, "libgomp: "), 1U) << failed.err;
  EXPECT_NE(failed.err.find("ipj: error: "), std::string::npos) << failed.err;  // the second start's own
}

// Under `ulimit -v` (batch schedulers' h_vmem) OpenBLAS retries for ever when it cannot map a thread's 128
// MiB GEMM buffer: runs near the limit hung in their first GEMM or at exit, or crashed asking for a bug
// report. Now each run either fits, or stops at once with one line naming the limit and how far to raise it.
// Limits from 700 MiB up: below ~the start-up mapping LibTorch's own static set-up throws before ipj's main
// (abort).
TEST(Cli, AnAddressSpaceLimitStopsARunWithAnErrorInsteadOfAHang) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "ASan's shadow memory needs more address space than any such limit";
#endif
  const std::string train =
      " train --model mlp --epochs 1 --limit 500 --test-limit 100 --no-save --no-energy --quiet --json";
  bool refused = false, fitted = false;
  for (int mib = 700; mib <= 1600 && !fitted; mib += 75) {
    const auto run = testing::run_process("bash -c 'ulimit -v " + std::to_string(mib * 1024) +
                                          "; exec timeout 120 " + testing::ipj_binary() + train + "'");
    if (run.exit_code == 134 && run.err.find("std::bad_alloc") != std::string::npos && run.out.empty())
      continue;
    if (run.exit_code == 0) {
      fitted = true;
      EXPECT_EQ(json::parse(run.out)["kind"], "train");
      continue;
    }
    SCOPED_TRACE("ulimit -v of " + std::to_string(mib) + " MiB");
    ASSERT_EQ(run.exit_code, 6) << run.err;  // 124: the hang; 139: a crash
    EXPECT_NE(run.err.find("ulimit -v (RLIMIT_AS) is"), std::string::npos) << run.err;
    EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
    refused = true;
  }
  EXPECT_TRUE(refused);
  EXPECT_TRUE(fitted);
  EXPECT_EQ(device::blas_bytes_short(1000ULL << 20, 600ULL << 20, 2), 0U);  // 600 + 2 x 129 + 64 = 922 MiB
  EXPECT_EQ(device::blas_bytes_short(900ULL << 20, 600ULL << 20, 2), 22ULL << 20);
  EXPECT_EQ(device::blas_bytes_short(900ULL << 20, 600ULL << 20, 0), 0U);  // a count of 0 is one thread
}

// libgomp reads its wait settings before main(): unless the user set them, ipj starts itself again with the
// policy chosen from the load at start (a short spin when quiet, passive when busy) or IPJ_WAIT_POLICY's.
TEST(CliThreads, TrainRunsWithTheWaitPolicyIpjChoseUnlessTheUserChoseOne) {
  testing::TempDir dir;
  testing::write_synthetic_idx_dataset(dir.file("data"), 100, 20, false);
  const std::string train =
      " train --model cnn --epochs 1 --batch 50 --quiet --no-energy --no-save --json --data " +
      dir.file("data");
  const std::string unset = "env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u OPENBLAS_THREAD_TIMEOUT ";
  const auto threads_of = [&](const std::string& environment) {
    const auto result = testing::run_process(unset + environment + " " + testing::ipj_binary() + train);
    EXPECT_EQ(result.exit_code, 0) << result.err;
    return result.exit_code == 0 ? json::parse(result.out)["threads"] : json::object();
  };
  const json passive = threads_of("IPJ_WAIT_POLICY=passive");
  EXPECT_EQ(passive["omp_wait_policy"], "PASSIVE (set by ipj)");
  EXPECT_EQ(passive["blas_wait"], "OPENBLAS_THREAD_TIMEOUT=4: sleep at once (set by ipj)");
  EXPECT_EQ(passive["wait_policy_reason"], "IPJ_WAIT_POLICY=passive");
  EXPECT_TRUE(passive.contains("replanned")) << passive;  // null unless a neighbour arrived mid-run
  EXPECT_TRUE(passive["replans"].is_array()) << passive;  // [] unless the pools changed mid-run
  const json spin = threads_of("IPJ_WAIT_POLICY=short-spin");
  EXPECT_EQ(spin["omp_wait_policy"], "spin, then sleep: GOMP_SPINCOUNT=3000 (set by ipj)");
  EXPECT_EQ(spin["blas_wait"], "OPENBLAS_THREAD_TIMEOUT=18: yield for 2^18 cycles, then sleep (set by ipj)");
  // The user's OpenBLAS timeout runs beside ipj's OpenMP choice; a stray marker does not make it ipj's.
  const json users_blas =
      threads_of("OPENBLAS_THREAD_TIMEOUT=30 IPJ_BLAS_WAIT_SET=1 IPJ_WAIT_POLICY=passive");
  EXPECT_EQ(users_blas["omp_wait_policy"], "PASSIVE (set by ipj)");
  EXPECT_EQ(users_blas["blas_wait"],
            "OPENBLAS_THREAD_TIMEOUT=30: yield for 2^30 cycles, then sleep (set by the user)");
  // auto: which one depends on this machine's load now; the reason says what was seen.
  const json automatic = threads_of("");
  const std::string policy = automatic.value("omp_wait_policy", ""),
                    reason = automatic.value("wait_policy_reason", "");
  EXPECT_TRUE(policy == "PASSIVE (set by ipj)" ||
              policy == "spin, then sleep: GOMP_SPINCOUNT=3000 (set by ipj)")
      << policy;
  EXPECT_TRUE(reason.find("of other work at start") != std::string::npos ||
              reason.find("1 CPU available") != std::string::npos)
      << reason;
  // The user's own setting runs, a stray marker does not make it ipj's, a forced IPJ_WAIT_POLICY that cannot
  // apply is said, and a value libgomp does not know is named as such.
  const auto chosen = testing::run_process(
      "env OMP_WAIT_POLICY=ACTIVE IPJ_WAIT_POLICY_SET=junk IPJ_REEXEC=1 " + testing::ipj_binary() + train);
  ASSERT_EQ(chosen.exit_code, 0) << chosen.err;
  EXPECT_EQ(json::parse(chosen.out)["threads"]["omp_wait_policy"], "ACTIVE (set by the user)");
  EXPECT_NE(json::parse(chosen.out)["threads"]["wait_policy_reason"].get<std::string>().find(
                "set before ipj started"),
            std::string::npos);
  const json garbage = threads_of("GOMP_SPINCOUNT=abc IPJ_WAIT_POLICY=passive");
  EXPECT_EQ(garbage["omp_wait_policy"],
            "spin, then sleep: GOMP_SPINCOUNT=abc (not a value libgomp knows: it runs its default, spin then "
            "sleep) (set by the user)");
  // GOMP_SPINCOUNT=0 is no spin at all (it read "spin, then sleep" before a hostile pass, 12-07)
  EXPECT_EQ(threads_of("GOMP_SPINCOUNT=0")["omp_wait_policy"],
            "sleep at once (no spin): GOMP_SPINCOUNT=0 (set by the user)");
  const auto ignored = testing::run_process(unset + "GOMP_SPINCOUNT=500 IPJ_WAIT_POLICY=passive " +
                                            testing::ipj_binary() + train);
  EXPECT_NE(ignored.err.find("IPJ_WAIT_POLICY=passive not applied"), std::string::npos) << ignored.err;
  // Only IPJ_NO_REEXEC=1 turns the second start off.
  EXPECT_EQ(threads_of("IPJ_NO_REEXEC=0 IPJ_WAIT_POLICY=passive")["omp_wait_policy"], "PASSIVE (set by ipj)");
  EXPECT_EQ(threads_of("IPJ_NO_REEXEC=1")["wait_policy_reason"], "IPJ_NO_REEXEC=1: libgomp's own default");
  testing::expect_cli_failure(
      testing::run_process(unset + "IPJ_WAIT_POLICY=fast " + testing::ipj_binary() + train), 2,
      "IPJ_WAIT_POLICY='fast'");
  // Quick commands start once: no second LibTorch load for --version.
  const auto version =
      testing::run_process(unset + "IPJ_WAIT_POLICY_SET= " + testing::ipj_binary() + " --version");
  EXPECT_EQ(version.exit_code, 0);
}

}  // namespace
}  // namespace ipj
