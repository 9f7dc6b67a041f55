// `ipj compare`: the seeds' case study. The seed recipe (fp32, SGD lr 0.01 momentum 0.9, batch 128, no
// accumulation, no prefetch, Python's default threads) against ipj's optimized recipe (native precision,
// tuned batch/LR/schedule, prefetch, tuned threads) on the same model, data and target accuracy, side by
// side.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ipj/core/json_io.hpp"
#include "ipj/data/dataset.hpp"
#include "ipj/train/python_baseline.hpp"
#include "ipj/train/train_config.hpp"
#include "ipj/train/trainer.hpp"

namespace ipj::train {

struct CompareConfig {
  models::ModelSource model = "mlp";  // a zoo name or a user's TorchScript file
  std::string data_dir = data::kDefaultDataDirectory;
  // --resize/--channels/...: recorded in both runs' configs.
  data::DataOptions data_options;
  double target_acc =
      0.0;  // 0 = the model's default (mlp 0.88, cnn 0.90, resnet18 0.90; files: as their kind)
  int baseline_max_epochs = 0;  // 0 = the model's default; the seed recipe's LR is constant, so only a cap
  int optimized_epochs = 0;     // 0 = the model's default; the cosine schedule's horizon
  std::uint64_t seed = 0;
  std::int64_t limit = 0;
  std::int64_t test_limit = 0;
  int threads = 0;
  std::string out_dir;  // baseline/ and optimized/ run folders + compare.json; empty = write nothing
  // Set: the seed recipe also runs in Python (one epoch) for the implementation effect; unset: it is null.
  std::optional<PythonBaseline> python_baseline;
  // --optimized-recipe: a recipe object (train/recipe.hpp) replacing the hand-tuned optimized recipe's
  // settings; compare's own settings (model, seed, limits, target, and --threads / --epochs when given) win.
  Json optimized_recipe_override;       // null = the hand-tuned recipe
  std::string optimized_recipe_source;  // where the override came from (a file name), for the report
  // --repeat: the two sides run alternately (baseline, optimized, baseline, ...) this many times; the
  // headline figures are the first pair's, `spread` has every run's.
  int repeats = 1;
  // --precision: the optimized side's precision (nullopt: auto, or the recipe file's); the seed recipe is
  // fp32.
  std::optional<Precision> precision;
};

// The seeds the optimized recipes were tuned on (docs/PERFORMANCE.md): a figure scored on them is not
// held out, and compare.json says so.
const std::vector<std::uint64_t>& tuning_seeds();

// The two recipes for a model (exposed so that docs, tests and benchmarks use exactly what compare runs).
TrainConfig baseline_recipe(const CompareConfig& config);
TrainConfig optimized_recipe(const CompareConfig& config);
double default_target_accuracy(const models::ModelSource& model);

struct CompareResult {
  TrainResult baseline;   // the first repeat's
  TrainResult optimized;  // the first repeat's
  Json python;            // the Python seed loop's output, or null
  Json report;            // the compare.json object (contract in docs/CLI.md)
};

CompareResult run_compare(const CompareConfig& config, const data::Dataset& dataset, const TrainHooks& hooks);

// {mean, min, max, stddev, samples} of `values` (numbers; nulls are skipped, count says how many were not).
Json spread_of(const std::vector<Json>& values);
// The machine_load records of several runs as one: figures averaged (other_cpus_max: the largest,
// throttled_periods: summed), busy when any run was busy.
Json combine_machine_loads(const std::vector<Json>& loads);

// The side-by-side table for the terminal.
std::string render_compare_table(const Json& report);

}  // namespace ipj::train
