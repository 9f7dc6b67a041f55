// `ipj tune` as a user runs it, on a tiny subset of Fashion-MNIST: the JSON contract, recipe.json accepted by
// `ipj train --recipe` and `ipj compare --optimized-recipe`, resume after SIGKILL mid-trial (no finished
// trial re-run, a torn line ignored), a user's TorchScript file on synthetic data (its identity in
// recipe.json; relative paths resumed from another folder), and clear errors for bad spaces, budgets and
// folders.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "ipj/core/atomic_file.hpp"
#include "ipj/core/json_io.hpp"
#include "ipj/energy/meter.hpp"
#include "support/test_support.hpp"
#include "support/user_models.hpp"

namespace ipj {
namespace {

using testing::ipj;

std::vector<Json> json_lines(const std::string& path) {
  std::vector<Json> lines;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    lines.push_back(Json::parse(line));
  return lines;
}

const char* kTinySubset = "--model mlp --limit 2000 --test-limit 500 --target-acc 0.72";

// The energy source a run reports on this machine: the weakest of the meters' in-total channels, as the
// energy monitor combines them (RAPL/NVML counters where they exist, else the CPU-time estimate).
std::string machine_energy_source() {
  const energy::MeterSet meters = energy::discover_meters();
  bool any = false;
  energy::EnergySource source = energy::EnergySource::estimated;
  for (const auto& meter : meters.meters)
    for (const auto& channel : meter->channels())
      if (channel.in_total) {
        source = any ? energy::weakest(source, channel.source) : channel.source;
        any = true;
      }
  return energy::source_name(source);
}

}  // namespace

TEST(TuneCli, JsonContractAndTheRecipeWorksInTrainAndCompare) {
  testing::TempDir dir;
  const std::string out = dir.file("tune");
  const auto result =
      ipj(std::string("tune ") + kTinySubset + " --budget-s 20 --max-trials 4 --json --quiet --out " + out);
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const Json report = Json::parse(result.out);  // exactly one object on stdout
  EXPECT_EQ(report["schema_version"], 1);
  EXPECT_EQ(report["kind"], "tune");
  ASSERT_TRUE(report["trials"].is_array());
  EXPECT_GE(report["trials"].size(), 1u);
  EXPECT_LE(report["trials"].size(), 4u);
  ASSERT_TRUE(report["pareto"].is_array());
  EXPECT_GE(report["pareto"].size(), 1u);
  const Json& best = report["best"];
  for (const char* key : {"recipe", "energy_to_target_j", "time_to_target_s", "test_acc", "energy_source"})
    EXPECT_TRUE(best.contains(key)) << key;
  ASSERT_TRUE(best["reached_target"].get<bool>()) << result.out;
  EXPECT_GT(best["energy_to_target_j"].get<double>(), 0.0);
  EXPECT_GE(best["test_acc"].get<double>(), 0.72);
  EXPECT_EQ(best["energy_source"], machine_energy_source());
  ASSERT_EQ(report["heldout_seeds"].size(), 3u);
  for (size_t run = 0; run < 3; ++run)
    EXPECT_EQ(report["heldout_seeds"][run]["seed"], run + 1);  // never the search's seed 0
  const Json& budget = report["budget"];
  EXPECT_NEAR(
      budget["total"].get<double>(),
      budget["search"].get<double>() + budget["confirm"].get<double>() + budget["heldout"].get<double>(),
      1e-6);
  EXPECT_EQ(json_lines(out + "/trials.jsonl").size(),
            report["trials"].size() + report["confirmations"].size() + 3);
  EXPECT_EQ(read_json_file(out + "/tune.json")["trials"], report["trials"]);

  // recipe.json trains as is, and flags given on the command line override it (here --batch).
  const Json recipe = read_json_file(out + "/recipe.json");
  EXPECT_EQ(recipe["kind"], "recipe");
  EXPECT_EQ(recipe["batch"], best["recipe"]["batch"]);
  const auto train = ipj("train --recipe " + out +
                         "/recipe.json --batch 64 --epochs 1 --limit 1000 --test-limit 200 "
                         "--no-save --json --quiet");
  ASSERT_EQ(train.exit_code, 0) << train.err;
  const Json trained = Json::parse(train.out);
  EXPECT_EQ(trained["config"]["batch"], 64);
  EXPECT_EQ(trained["config"]["lr"], recipe["lr"]);
  EXPECT_EQ(trained["config"]["schedule"], recipe["schedule"]);
  EXPECT_EQ(trained["config"]["prefetch"], recipe["prefetch"]);
  EXPECT_EQ(trained["config"]["optimizer_impl"], recipe["optimizer_impl"]);
  EXPECT_DOUBLE_EQ(trained["config"]["target_acc"].get<double>(), 0.72);

  const auto compare = ipj("compare --optimized-recipe " + out +
                           "/recipe.json --limit 1000 --test-limit 200 "
                           "--max-epochs 1 --epochs 1 --json --quiet --out " +
                           dir.file("compare"));
  ASSERT_EQ(compare.exit_code, 0) << compare.err;
  const Json compared = Json::parse(compare.out);
  EXPECT_EQ(compared["optimized"]["recipe"]["batch"], recipe["batch"]);
  EXPECT_EQ(compared["optimized"]["recipe"]["lr"], recipe["lr"]);
  EXPECT_EQ(compared["optimized"]["recipe"]["epochs"], 1);       // --epochs given: overrides the recipe
  EXPECT_DOUBLE_EQ(compared["target_acc"].get<double>(), 0.72);  // the recipe's target
  EXPECT_EQ(compared["optimized_recipe"].get<std::string>().rfind("recipe ", 0), 0u);
  EXPECT_EQ(compared["baseline"]["recipe"]["batch"], 128);  // the seed recipe is untouched

  // A recipe that evaluates through ipj's TorchScript program (--compile jit, in the tuner's space) runs in
  // compare too (it once failed there with an internal error: compare gave the trainer no compiled
  // evaluator).
  Json jit_recipe = recipe;
  jit_recipe["compile"] = "jit";
  write_json_file(dir.file("jit_recipe.json"), jit_recipe);
  const auto jit_compare =
      ipj("compare --optimized-recipe " + dir.file("jit_recipe.json") +
          " --limit 1000 --test-limit 200 --max-epochs 1 --epochs 1 --json --quiet --out " +
          dir.file("compare-jit"));
  ASSERT_EQ(jit_compare.exit_code, 0) << jit_compare.err;
  EXPECT_EQ(Json::parse(jit_compare.out)["optimized"]["recipe"]["compile"], "jit");
}

TEST(TuneCli, ResumeAfterSigkillMidTrialRerunsNoFinishedTrial) {
  testing::TempDir dir;
  const std::string out = dir.file("tune"), err = dir.file("stderr");
  const std::string command = testing::ipj_binary() + " tune " + kTinySubset +
                              " --max-trials 6 --heldout 1 --budget-s 100 --out " + out;
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int err_fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int null_fd = ::open("/dev/null", O_WRONLY);
    ::dup2(null_fd, 1);
    ::dup2(err_fd, 2);
    ::execl("/bin/sh", "sh", "-c", ("exec " + command).c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Kill it as soon as trial 1 has started (trial 0 is then in the log).
  bool started = false;
  for (int wait = 0; wait < 3000 && !started; ++wait) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    started = std::filesystem::exists(err) && read_file(err).find("[tune] trial 1 (") != std::string::npos;
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(started) << read_file(err);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  const std::vector<Json> before = json_lines(out + "/trials.jsonl");
  ASSERT_GE(before.size(), 1u);
  ASSERT_LT(before.size(), 6u);
  const std::string log_before = read_file(out + "/trials.jsonl");
  std::ofstream(out + "/trials.jsonl", std::ios::app)
      << R"({"schema_version":1,"kind":"tune-trial","phase":"sea)";

  const auto resumed = ipj("tune --out " + out + " --resume --json --quiet");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("torn last line"), std::string::npos) << resumed.err;
  const Json report = Json::parse(resumed.out);
  ASSERT_EQ(report["trials"].size(), 6u);
  for (size_t index = 0; index < report["trials"].size(); ++index) {
    const Json& trial = report["trials"][index];
    EXPECT_EQ(trial["trial"], index);
    if (index < before.size()) {
      EXPECT_EQ(trial, before[index]) << "finished trial " << index << " must be kept as it was";
      EXPECT_EQ(trial["session"], 1);
    } else {
      EXPECT_EQ(trial["session"], 2) << "trial " << index;
    }
  }
  EXPECT_EQ(report["search"]["sessions"], 2);
  EXPECT_EQ(report["heldout_seeds"].size(), 1u);
  const std::string log_after = read_file(out + "/trials.jsonl");
  EXPECT_EQ(log_after.rfind(log_before, 0), 0u);  // the old lines unchanged, the torn one gone
  EXPECT_EQ(json_lines(out + "/trials.jsonl").size(), 6u + report["confirmations"].size() + 1u);
}

TEST(TuneCli, TunesAUsersTorchScriptFileWhoseRecipeNamesItsModel) {
  testing::TempDir dir;
  const auto made = testing::make_user_models(dir.path(), {"flat_mlp_scripted", "mlp_scripted"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  testing::write_synthetic_idx_dataset(dir.file("data"), 600, 200, /*gzip=*/false);
  const std::string model = dir.file("flat_mlp_scripted.pt");  // forward takes [B, 784]
  const std::string run = " --model " + model + " --input-shape 784 --data " + dir.file("data");
  write_file_atomically(dir.file("space.json"), R"({"schema_version": 1, "dimensions": {"lr_scale": [1, 2],
      "batch": [32, 64]}, "fixed": {"epochs": 2, "prefetch": 0}})");

  // The model's identity is the run's: a space can neither search nor fix it.
  for (const char* space : {R"({"schema_version": 1, "dimensions": {"input_shape": [[784], [1, 28, 28]]}})",
                            R"({"schema_version": 1, "fixed": {"model_source": "zoo"}})",
                            R"({"schema_version": 1, "fixed": {"model": "cnn"}})"}) {
    write_file_atomically(dir.file("identity.json"), space);
    testing::expect_cli_failure(ipj("tune" + run + " --target-acc 0.8 --space " + dir.file("identity.json") +
                                    " --out " + dir.file("refused")),
                                3, "part of the run's identity");
  }
  testing::expect_cli_failure(ipj("tune" + run + " --out " + dir.file("refused")), 2,
                              "--target-acc is required");
  // A file that does not fit the data fails once, before the search (not as a failed trial after another).
  testing::expect_cli_failure(ipj("tune --model " + model + " --input-shape 3,32,32 --data " +
                                  dir.file("data") + " --target-acc 0.8 --quiet --out " + dir.file("misfit")),
                              2, "--input-shape 3,32,32 does not match the data set's images");

  // Relative --model, --data and --out, from the folder that holds them.
  const std::string out = dir.file("tune");
  const auto result = testing::run_process(
      "cd " + dir.path() + " && " + testing::ipj_binary() +
      " tune --model flat_mlp_scripted.pt --input-shape 784 --data data --target-acc 0.8 --space space.json"
      " --max-trials 2 --confirm 1 --heldout 1 --budget-s 60 --json --quiet --out tune");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const Json report = Json::parse(result.out);
  ASSERT_TRUE(report["best"]["reached_target"].get<bool>()) << result.out;
  EXPECT_EQ(report["trials"].size(), 2u);
  for (const auto& trial : report["trials"])
    EXPECT_NE(trial["status"], "failed") << trial.dump();
  const Json settings = read_json_file(out + "/tune_settings.json");
  EXPECT_EQ(settings["input_shape"], "784");
  EXPECT_EQ(settings["model_file"]["xxh3_64"].get<std::string>().size(), 16u);
  // tune_settings.json records absolute paths, so --resume works from another folder.
  EXPECT_EQ(settings["model"], std::filesystem::absolute(model).lexically_normal().string());
  EXPECT_EQ(settings["data"], std::filesystem::absolute(dir.file("data")).lexically_normal().string());
  const auto resumed = testing::run_process("cd / && " + testing::ipj_binary() + " tune --out " + out +
                                            " --resume --max-trials 3 --json --quiet");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_EQ(Json::parse(resumed.out)["trials"].size(), 3u);
  // A run recorded with a relative path (before ipj recorded absolute ones) says where to resume from.
  Json relative = settings;
  relative["model"] = "flat_mlp_scripted.pt";
  write_json_file(out + "/tune_settings.json", relative);
  testing::expect_cli_failure(
      testing::run_process("cd / && " + testing::ipj_binary() + " tune --out " + out + " --resume"), 2,
      "run `ipj tune --resume` from the folder where the run started");
  write_json_file(out + "/tune_settings.json", settings);

  // recipe.json names the file (absolute path), its source and input shape; the target is the run's.
  const Json recipe = read_json_file(out + "/recipe.json");
  EXPECT_EQ(recipe["model"], std::filesystem::absolute(model).lexically_normal().string());
  EXPECT_EQ(recipe["model_source"], "torchscript");
  EXPECT_EQ(recipe["input_shape"], Json::array({784}));
  EXPECT_DOUBLE_EQ(recipe["target_acc"].get<double>(), 0.8);
  EXPECT_EQ(recipe["epochs"], 2);                                         // fixed by the space
  EXPECT_TRUE(recipe["batch"] == 32 || recipe["batch"] == 64) << recipe;  // searched

  // The recipe alone trains that file, from any folder.
  const std::string data = " --data " + dir.file("data") + " --epochs 1 --no-save --json --quiet";
  const auto alone = testing::run_process("cd / && " + testing::ipj_binary() + " train --recipe " + out +
                                          "/recipe.json" + data);
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  EXPECT_EQ(alone.err, "");
  const Json trained = Json::parse(alone.out);
  EXPECT_EQ(trained["config"]["model_source"], "torchscript");
  EXPECT_EQ(trained["config"]["input_shape"], Json::array({784}));
  EXPECT_EQ(trained["config"]["batch"], recipe["batch"]);
  // --model naming the same file without --input-shape takes the recipe's input shape, silently.
  const auto same = ipj("train --recipe " + out + "/recipe.json --model " + model + data);
  ASSERT_EQ(same.exit_code, 0) << same.err;
  EXPECT_EQ(same.err, "");
  EXPECT_EQ(Json::parse(same.out)["config"]["input_shape"], Json::array({784}));
  // Another model: the flag wins, with a warning naming the recipe's model.
  const auto other = ipj("train --recipe " + out + "/recipe.json --model mlp" + data);
  ASSERT_EQ(other.exit_code, 0) << other.err;
  EXPECT_NE(other.err.find("warning: recipe '" + out + "/recipe.json' was tuned for model " +
                           recipe["model"].get<std::string>()),
            std::string::npos)
      << other.err;
  EXPECT_EQ(Json::parse(other.out)["config"]["model_source"], "zoo");
  // compare --optimized-recipe trains the recipe's file on both sides.
  const auto compare = ipj("compare --optimized-recipe " + out + "/recipe.json --data " + dir.file("data") +
                           " --max-epochs 1 --epochs 1 --json --quiet --out " + dir.file("compare"));
  ASSERT_EQ(compare.exit_code, 0) << compare.err;
  EXPECT_EQ(Json::parse(compare.out)["baseline"]["recipe"]["input_shape"], Json::array({784}));
  // The file replaced by other weights: training goes on, with a warning that it changed since tuning.
  std::filesystem::copy_file(dir.file("mlp_scripted.pt"), model,
                             std::filesystem::copy_options::overwrite_existing);
  const auto changed = ipj("train --recipe " + out + "/recipe.json" + data);
  ASSERT_EQ(changed.exit_code, 0) << changed.err;
  EXPECT_NE(changed.err.find("changed since the recipe was tuned"), std::string::npos) << changed.err;
  testing::expect_cli_failure(ipj("tune --out " + out + " --resume"), 2, "changed since this run started");
}

TEST(TuneCli, BadSpacesBudgetsAndFoldersGiveClearErrors) {
  testing::TempDir dir;
  write_file_atomically(dir.file("space.json"),
                        R"({"schema_version": 1, "dimensions": {"batch_size": [64]}})");
  testing::expect_cli_failure(ipj("tune --space " + dir.file("space.json") + " --out " + dir.file("a")), 3,
                              "unknown dimension \"batch_size\"");
  testing::expect_cli_failure(ipj("tune --budget-s -5 --out " + dir.file("a")), 2, "--budget-s");
  testing::expect_cli_failure(ipj("tune --budget-s 5 --budget-j 5 --out " + dir.file("a")), 2, "--budget-j");
  testing::expect_cli_failure(ipj("tune --allow-power-limit --out " + dir.file("a")), 2, "--device cuda");
  testing::expect_cli_failure(ipj("tune --resume --out " + dir.file("none")), 2,
                              "start the run without --resume");
  testing::expect_cli_failure(ipj("tune --model nope --out " + dir.file("a")), 2, "--model");
  std::filesystem::create_directories(dir.file("used"));
  write_file_atomically(dir.file("used/tune_settings.json"), "{}");
  testing::expect_cli_failure(ipj("tune --out " + dir.file("used")), 2, "already holds a tune run");
  write_file_atomically(dir.file("bad-recipe.json"), R"({"schema_version": 1, "batch": "big"})");
  testing::expect_cli_failure(ipj("train --recipe " + dir.file("bad-recipe.json") + " --no-save"), 3,
                              "\"batch\" must be a number");
  testing::expect_cli_failure(ipj("compare --optimized-recipe " + dir.file("missing.json")), 4,
                              "missing.json");
  const auto help = ipj("tune --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("Example: ipj tune"), std::string::npos) << help.out;
  const auto space = ipj("tune --print-space");
  ASSERT_EQ(space.exit_code, 0) << space.err;
  EXPECT_EQ(Json::parse(space.out)["kind"], "tune-space");
}

}  // namespace ipj
