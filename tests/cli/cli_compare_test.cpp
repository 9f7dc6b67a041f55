// `ipj compare` as a user runs it: its JSON contract, repeats that alternate the sides, a busy machine
// marked, an unreached target, the human table, and the Python baseline on a held-out seed.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/cli_fixture.hpp"
#include "ipj/core/atomic_file.hpp"
#include "ipj/device/torch_info.hpp"
#include "support/test_support.hpp"

namespace ipj {
namespace {

using nlohmann::json;

using testing::expected_energy_source;
using testing::ipj;

}  // namespace

TEST(CliCompare, JsonContractOnASmallSubset) {
  testing::TempDir dir;
  const auto result =
      ipj("compare --json --quiet --limit 3000 --test-limit 1000 --target-acc 0.6 --out " + dir.file("cmp"));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const json report = json::parse(result.out);
  EXPECT_EQ(report["target_acc"], 0.6);
  for (const char* side : {"baseline", "optimized"}) {
    const json& run = report[side];
    for (const char* key : {"test_acc", "samples_per_s", "wall_s", "energy_j", "energy_source", "precision",
                            "time_to_target_s", "energy_to_target_j", "recipe"})
      EXPECT_TRUE(run.contains(key)) << side << "." << key;
    EXPECT_GE(run["test_acc"].get<double>(), 0.6) << side;
    EXPECT_TRUE(run["time_to_target_s"].is_number()) << side;
  }
  EXPECT_EQ(report["baseline"]["precision"], "fp32");
  EXPECT_EQ(report["baseline"]["recipe"]["lr"], 0.01);
  EXPECT_TRUE(report["accuracy_advice"].is_null()) << report["accuracy_advice"];  // ipj's own model
  EXPECT_EQ(report["baseline"]["recipe"]["batch"], 128);
  EXPECT_GT(report["speedup"].get<double>(), 0.0);
  EXPECT_EQ(report["recipe_speedup"], report["speedup"]);   // optimized vs seed recipe, both in ipj
  EXPECT_TRUE(report["implementation_speedup"].is_null());  // the Python side was not run
  EXPECT_TRUE(report["total_speedup"].is_null());
  EXPECT_EQ(report["seeds"], json::array({0}));
  EXPECT_FALSE(report["held_out"].get<bool>());  // seed 0 tuned the recipes
  EXPECT_GT(report["energy_ratio"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(
      report["acc_delta_pt"].get<double>(),
      (report["optimized"]["test_acc"].get<double>() - report["baseline"]["test_acc"].get<double>()) * 100);
  EXPECT_EQ(json::parse(read_file(dir.file("cmp/compare.json")))["kind"], "compare");
}

TEST(CliCompare, RepeatRunsTheSidesAlternatelyAndRecordsSpreadThreadsAndLoad) {
  testing::TempDir dir;
  const auto result =
      ipj("compare --json --quiet --limit 500 --test-limit 200 --target-acc 0.5 --max-epochs 1 --epochs 1 "
          "--repeat 2 --out " +
          dir.file("cmp"));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const json report = json::parse(result.out);
  EXPECT_EQ(report["repeats"], 2);
  for (const char* side : {"baseline", "optimized"}) {
    const json& spread = report["spread"][side];
    for (const char* metric : {"samples_per_s", "wall_s", "energy_j"}) {
      ASSERT_TRUE(spread.contains(metric)) << side << "." << metric;
      EXPECT_EQ(spread[metric]["samples"].size(), 2u) << side << "." << metric;
      EXPECT_LE(spread[metric]["min"].get<double>(), spread[metric]["mean"].get<double>());
      EXPECT_GE(spread[metric]["max"].get<double>(), spread[metric]["mean"].get<double>());
      EXPECT_TRUE(spread[metric]["stddev"].is_number());
    }
    // The headline figures are the first pair's.
    EXPECT_EQ(spread["samples_per_s"]["samples"][0], report[side]["samples_per_s"]) << side;
    const json& threads = report[side]["threads"];
    for (const char* key : {"plan", "reason", "available_cpus", "quota", "torch", "blas"})
      EXPECT_TRUE(threads.contains(key)) << side << ".threads." << key;
    EXPECT_GE(threads["available_cpus"].get<int>(), 1);
    EXPECT_TRUE(report[side]["machine_load"]["busy"].is_boolean()) << side;
    // Each repeat keeps its run folder, with the same records in results.json.
    const json second = json::parse(read_file(dir.file(std::string("cmp/") + side + "-2/results.json")));
    EXPECT_EQ(second["threads"]["plan"], side == std::string("baseline") ? "python" : "tuned");
    for (const char* key : {"before", "during", "busy"})
      EXPECT_TRUE(second["machine_load"].contains(key)) << key;
    EXPECT_EQ(second["final"]["samples_per_s"], spread["samples_per_s"]["samples"][1]) << side;
  }
  for (const char* key : {"plan", "reason", "available_cpus", "quota"})
    EXPECT_TRUE(report["threads"].contains(key)) << "threads." << key;
  EXPECT_EQ(report["threads"]["plan"], "tuned");
  const json& load = report["machine_load"];
  for (const char* key : {"other_cpus", "busy_cpus", "steal_cpus", "loadavg_1m"}) {
    EXPECT_TRUE(load["before"].contains(key)) << key;
    EXPECT_TRUE(load["during"].contains(key)) << key;
  }
  ASSERT_TRUE(load["busy"].is_boolean());
  EXPECT_EQ(load["runs"].size(), 4u);  // baseline, optimized, baseline, optimized
  EXPECT_EQ(load["runs"][1]["side"], "optimized");
  EXPECT_EQ(load["runs"][2]["repeat"], 2);
  // Busy: marked in the JSON and warned about, never a failure.
  EXPECT_EQ(report["verdict_stands"].get<bool>(), report["warnings"].empty());
  if (load["busy"].get<bool>()) {
    EXPECT_FALSE(report["verdict_stands"].get<bool>());
    EXPECT_NE(result.err.find("verdict may not stand"), std::string::npos) << result.err;
  }
  EXPECT_EQ(json::parse(read_file(dir.file("cmp/compare.json")))["repeats"], 2);
  testing::expect_cli_failure(ipj("compare --repeat 0"), 2, "--repeat");
  testing::expect_cli_failure(ipj("compare --precision fp64"), 2, "--precision");
}

// A neighbour: a child process spinning on one CPU for the object's lifetime.
class CpuHog {
 public:
  CpuHog() : pid_(::fork()) {
    if (pid_ == 0)
      for (volatile unsigned long spin = 0;; spin = spin + 1) {
      }
  }
  ~CpuHog() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  CpuHog(const CpuHog&) = delete;
  CpuHog& operator=(const CpuHog&) = delete;

 private:
  pid_t pid_;
};

TEST(CliCompare, BusyMachineIsWarnedAboutAndMarkedButNotAFailure) {
  testing::TempDir dir;
  testing::ProcessResult result;
  {
    const CpuHog hog;
    // The load-following plan, as users get it (the suite sets IPJ_STATIC_THREADS for its bit-exact tests).
    result =
        testing::run_process("env -u IPJ_STATIC_THREADS " + testing::ipj_binary() +
                             " compare --quiet --limit 300 --test-limit 100 --target-acc 0.5 --max-epochs 1 "
                             "--epochs 1 --out " +
                             dir.file("cmp"));
  }
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const json report = json::parse(read_file(dir.file("cmp/compare.json")));
  ASSERT_TRUE(report["machine_load"]["busy"].get<bool>()) << report["machine_load"].dump();
  EXPECT_FALSE(report["verdict_stands"].get<bool>());
  EXPECT_NE(result.out.find("WARNING: the machine was busy"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("verdict may not stand"), std::string::npos) << result.out;
  EXPECT_NE(result.err.find("ipj: warning: the machine was busy"), std::string::npos) << result.err;
  // The default plan saw the neighbour: fewer threads than CPUs, and it says why.
  const json& threads = report["optimized"]["threads"];
  if (report["optimized"]["machine_load"]["before"]["busy"].get<bool>()) {
    EXPECT_NE(threads["reason"].get<std::string>().find("busy"), std::string::npos) << threads.dump();
    EXPECT_LT(std::max(threads["torch"].get<int>(), threads["blas"].get<int>()),
              std::max(2, threads["available_cpus"].get<int>()));
  }
}

TEST(CliCompare, UnreachedTargetIsReportedAsNull) {
  testing::TempDir dir;
  const auto result =
      ipj("compare --json --quiet --limit 500 --test-limit 200 --target-acc 0.999 --max-epochs 1 "
          "--epochs 1 --out " +
          dir.file("cmp"));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const json report = json::parse(result.out);
  EXPECT_TRUE(report["baseline"]["time_to_target_s"].is_null());
  EXPECT_TRUE(report["speedup"].is_null());
  EXPECT_TRUE(report["energy_ratio"].is_null());
  testing::expect_cli_failure(ipj("compare --model vgg"), 2, "vgg");
}

TEST(CliCompare, HumanTableShowsBothRecipesSideBySide) {
  testing::TempDir dir;
  const auto result =
      ipj("compare --quiet --limit 500 --test-limit 200 --target-acc 0.5 --max-epochs 1 --epochs 1 "
          "--out " +
          dir.file("cmp"));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const std::string source = expected_energy_source(
      json::parse(read_file(dir.file("cmp/baseline/results.json")))["energy"]["meters"]);
  for (const std::string& expected :
       {std::string("baseline (seed recipe)"), std::string("optimized (ipj)"), std::string("time to 0.500"),
        std::string("energy to 0.500"), std::string("accuracy per kJ"), source, std::string("compare.json"),
        std::string("recipe effect"), std::string("implementation effect"),
        std::string("not measured (--python-baseline)"), std::string("seed 0 (a tuning seed")})
    EXPECT_NE(result.out.find(expected), std::string::npos) << expected << " missing in:\n" << result.out;
}

TEST(CliCompare, PythonBaselineGivesTheImplementationSpeedupOnAHeldOutSeed) {
  testing::TempDir dir;
  const auto result =
      ipj("compare --json --quiet --limit 600 --test-limit 200 --target-acc 0.5 --max-epochs 1 "
          "--epochs 1 --seed 3 --python-baseline --python " +
          testing::python_path() + " --out " + dir.file("cmp"));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const json report = json::parse(result.out);
  const json& python = report["python_baseline"];
  ASSERT_TRUE(python.is_object()) << report.dump();
  EXPECT_EQ(python["model"], "mlp");
  EXPECT_EQ(python["samples"], 600);  // one epoch of the same subset
  EXPECT_DOUBLE_EQ(report["implementation_speedup"].get<double>(),
                   report["baseline"]["samples_per_s"].get<double>() / python["samples_per_s"].get<double>());
  if (report["recipe_speedup"].is_number()) {
    EXPECT_DOUBLE_EQ(report["total_speedup"].get<double>(),
                     report["recipe_speedup"].get<double>() * report["implementation_speedup"].get<double>());
  } else {
    EXPECT_TRUE(report["total_speedup"].is_null());
  }
  EXPECT_EQ(report["seeds"], json::array({3}));
  EXPECT_TRUE(report["held_out"].get<bool>());
  EXPECT_EQ(report["tuning_seeds"], json::array({0, 1, 2}));
  // Models the Python loop does not have, and an interpreter that does not exist, are usage errors.
  testing::expect_cli_failure(ipj("compare --model resnet18 --limit 100 --python-baseline"), 2,
                              "--python-baseline");
  testing::expect_cli_failure(ipj("compare --limit 100 --python-baseline --python /nonexistent/python3"), 2,
                              "--python");
}

}  // namespace ipj
