// The baseline-vs-optimized case study: recipes per model, the two runs, the side-by-side report.
#include "ipj/train/compare.hpp"

#include <algorithm>
#include <filesystem>

#include "ipj/core/error.hpp"
#include "ipj/core/number_format.hpp"
#include "ipj/core/text_table.hpp"
#include "ipj/energy/energy_report.hpp"
#include "ipj/models/catalog.hpp"
#include "ipj/train/recipe.hpp"

namespace ipj::train {
namespace {

struct ModelDefaults : models::CompareDefaults {
  bool convolutional = false;  // channels-last in the optimized recipe
};

// The catalog's compare defaults of a zoo model (tuned on this VM for mlp and cnn: docs/PERFORMANCE.md).
// A user's TorchScript model gets the defaults of the catalog's file template of its kind: cnn's when it has
// 4-D (convolution) weights, mlp's otherwise.
ModelDefaults defaults_for(const models::ModelSource& model) {
  ModelDefaults defaults;
  defaults.convolutional = models::is_convolutional(model);
  const models::ModelEntry& entry = model.is_file() ? models::file_template_entry(defaults.convolutional)
                                                    : models::model_entry(model.zoo_name);
  static_cast<models::CompareDefaults&>(defaults) = entry.compare;
  return defaults;
}

std::string child_folder(const CompareConfig& config, const char* name) {
  return config.out_dir.empty() ? "" : (std::filesystem::path(config.out_dir) / name).string();
}

Json side(const TrainResult& result, const TrainConfig& recipe) {
  const Json& final_json = result.report["final"];
  Json json;
  for (const char* key : {"test_acc", "samples_per_s", "wall_s", "energy_j", "energy_source", "precision",
                          "time_to_target_s", "energy_to_target_j", "acc_per_kj", "epochs_completed"})
    json[key] = final_json[key];
  json["recipe"] = to_json(recipe);
  json["threads"] = result.report["threads"];
  json["precision_reason"] = result.report["precision"]["reason"];
  json["machine_load"] = result.report.value("machine_load", Json(nullptr));
  return json;
}

// The figures whose spread over --repeat runs compare.json records, per side.
constexpr const char* kSpreadMetrics[] = {"samples_per_s", "wall_s", "energy_j", "time_to_target_s",
                                          "energy_to_target_j"};

Json side_spread(const std::vector<TrainResult>& runs) {
  Json spread = Json::object();
  for (const char* metric : kSpreadMetrics) {
    std::vector<Json> values;
    for (const TrainResult& run : runs)
      values.push_back(run.report["final"][metric]);
    spread[metric] = spread_of(values);
  }
  return spread;
}

// A repeat's run folder: baseline/ and optimized/ for the first, baseline-2/ ... after it.
TrainConfig for_repeat(TrainConfig recipe, int repeat) {
  if (repeat > 0 && !recipe.out_dir.empty()) recipe.out_dir += "-" + std::to_string(repeat + 1);
  return recipe;
}

// machine_load of every run, the spread, and the warnings when the verdict may not stand.
void add_noise_records(Json& report, const std::vector<TrainResult>& baselines,
                       const std::vector<TrainResult>& optimizeds) {
  std::vector<Json> loads;
  Json runs = Json::array();
  for (std::size_t repeat = 0; repeat < baselines.size(); ++repeat)
    for (const auto* side : {&baselines, &optimizeds}) {
      const Json load = (*side)[repeat].report.value("machine_load", Json(nullptr));
      loads.push_back(load);
      runs.push_back({{"side", side == &baselines ? "baseline" : "optimized"},
                      {"repeat", repeat + 1},
                      {"busy", load.is_object() ? load.value("busy", false) : false}});
    }
  Json machine_load = combine_machine_loads(loads);
  machine_load["runs"] = runs;
  const bool busy = machine_load["busy"].get<bool>();
  // The optimized side's plan (ipj's default, the one under test) on top; the seed recipe's beside it.
  report["threads"] = optimizeds.front().report["threads"];
  report["threads"]["baseline"] = baselines.front().report["threads"];
  report["repeats"] = baselines.size();
  report["spread"] = {{"baseline", side_spread(baselines)}, {"optimized", side_spread(optimizeds)}};
  report["machine_load"] = machine_load;
  Json warnings = Json::array();
  if (busy)
    warnings.push_back(
        "the machine was busy (other work used >= 0.5 CPU beside a run: see machine_load): the verdict may "
        "not "
        "stand; rerun on a quiet machine, or with --repeat 3 to see the spread");
  for (const char* side : {"baseline", "optimized"}) {
    const Json& range = report["spread"][side]["samples_per_s"]["relative_range"];
    if (baselines.size() > 1 && range.is_number() && range.get<double>() > 0.2)
      warnings.push_back(std::string("the ") + side + " side's samples/s varied by " +
                         format_number("%.0f", range.get<double>() * 100.0) +
                         "% over the repeats: the verdict may not stand");
  }
  report["verdict_stands"] = warnings.empty();
  report["warnings"] = warnings;
}

Json ratio_or_null(const Json& numerator, const Json& denominator) {
  if (!numerator.is_number() || !denominator.is_number() || denominator.get<double>() <= 0.0) return nullptr;
  return numerator.get<double>() / denominator.get<double>();
}

std::string number(const Json& value, const char* format, const char* missing = "not reached") {
  return format_number(value, format, missing);
}

// The spread over --repeat runs, the machine's load, and the warning when the verdict may not stand.
std::string noise_lines(const Json& report) {
  std::string text;
  const int repeats = report.value("repeats", 1);
  if (repeats > 1 && report.contains("spread")) {
    text += "samples/s over " + std::to_string(repeats) + " interleaved runs:";
    for (const char* side : {"baseline", "optimized"}) {
      const Json& spread = report["spread"][side]["samples_per_s"];
      text += std::string(" ") + side + " " + number(spread["mean"], "%.0f") + " (" +
              number(spread["min"], "%.0f") + "-" + number(spread["max"], "%.0f") + ")";
    }
    text += "\n";
  }
  if (report.contains("machine_load")) {
    const Json& load = report["machine_load"];
    text +=
        "machine load: other work " + number(load["before"].value("other_cpus", Json(nullptr)), "%.2f", "?") +
        " CPU before, " + number(load["during"].value("other_cpus", Json(nullptr)), "%.2f", "?") +
        " during (load average " + number(load["during"].value("loadavg_1m", Json(nullptr)), "%.2f", "?") +
        ")" + (load.value("busy", false) ? ": BUSY" : ": quiet") + "\n";
  }
  for (const auto& warning : report.value("warnings", Json::array()))
    text += "WARNING: " + warning.get<std::string>() + "\n";
  return text;
}

}  // namespace

const std::vector<std::uint64_t>& tuning_seeds() {
  static const std::vector<std::uint64_t> seeds = {0, 1, 2};
  return seeds;
}

double default_target_accuracy(const models::ModelSource& model) {
  return defaults_for(model).target_acc;
}

TrainConfig baseline_recipe(const CompareConfig& config) {
  const ModelDefaults defaults = defaults_for(config.model);
  TrainConfig recipe;
  recipe.model = config.model;
  recipe.data_dir = config.data_dir;
  recipe.data_options = config.data_options;
  recipe.epochs = config.baseline_max_epochs > 0 ? config.baseline_max_epochs : defaults.baseline_max_epochs;
  recipe.batch_size = 128;
  recipe.learning_rate = 0.01;
  recipe.optimizer = OptimizerKind::sgd;
  recipe.momentum = 0.9;
  recipe.precision = Precision::fp32;
  recipe.prefetch_batches = 0;  // the seeds' DataLoader without workers
  recipe.thread_plan = ThreadPlanChoice::python;
  recipe.allocator = AllocatorChoice::system;
  recipe.optimizer_impl = OptimizerImpl::torch;  // the seeds' optimizer.zero_grad() + optimizer.step()
  recipe.seed = config.seed;
  recipe.threads = config.threads;
  recipe.limit = config.limit;
  recipe.test_limit = config.test_limit;
  recipe.target_acc = config.target_acc > 0.0 ? config.target_acc : defaults.target_acc;
  recipe.out_dir = child_folder(config, "baseline");
  return recipe;
}

TrainConfig optimized_recipe(const CompareConfig& config) {
  const ModelDefaults defaults = defaults_for(config.model);
  TrainConfig recipe = baseline_recipe(config);
  recipe.epochs = config.optimized_epochs > 0 ? config.optimized_epochs : defaults.optimized_epochs;
  recipe.precision = Precision::automatic;
  recipe.batch_size = defaults.optimized_batch;
  recipe.learning_rate = defaults.optimized_lr;
  recipe.schedule = ScheduleKind::cosine;
  recipe.accum = 1;  // no memory pressure on the CPU: accumulation would only add steps
  recipe.prefetch_batches = 4;
  recipe.thread_plan = ThreadPlanChoice::tuned;
  recipe.allocator = AllocatorChoice::tuned;
  recipe.optimizer_impl = OptimizerImpl::fused;
  // NHWC for convolutional models (1.4-1.6x cnn training here, docs/PERFORMANCE.md). With it, eager bf16
  // evaluation beats the frozen fp32 TorchScript graph (0.37 s vs 0.44 s for the cnn's 10,000 test images),
  // so the recipe no longer uses --compile jit.
  recipe.memory_format = defaults.convolutional ? MemoryFormat::channels_last : MemoryFormat::contiguous;
  recipe.compile = CompileMode::none;
  recipe.out_dir = child_folder(config, "optimized");
  if (config.precision) recipe.precision = *config.precision;
  if (config.optimized_recipe_override.is_null()) return recipe;
  TrainConfig from_file = apply_recipe(recipe, config.optimized_recipe_override, {"model"});
  if (config.precision) from_file.precision = *config.precision;
  if (config.threads > 0) from_file.threads = config.threads;
  if (config.optimized_epochs > 0) from_file.epochs = config.optimized_epochs;
  from_file.target_acc = recipe.target_acc;  // both sides train to the same target
  return from_file;
}

CompareResult run_compare(const CompareConfig& config, const data::Dataset& dataset,
                          const TrainHooks& hooks) {
  if (!config.model.is_file()) models::require_known_model(config.model.zoo_name);
  if (!(config.target_acc >= 0.0 && config.target_acc < 1.0))  // NaN fails too
    fail(ErrorCategory::usage, "--target-acc must be a fraction in (0, 1), or 0 for the model's default");
  const TrainConfig baseline = baseline_recipe(config);
  const TrainConfig optimized = optimized_recipe(config);
  CompareResult result;
  // Python first: a failing interpreter or script stops the comparison before the long runs.
  result.python = config.python_baseline ? run_python_seed_loop(*config.python_baseline, baseline, dataset)
                                         : Json(nullptr);
  // hooks.evaluate replaces a run's evaluation: only a side whose recipe compiles it (--compile jit, e.g.
  // from a recipe file) uses it; the other evaluates eagerly.
  auto hooks_for = [&hooks](const TrainConfig& recipe) {
    TrainHooks side_hooks = hooks;
    if (recipe.compile != CompileMode::jit) side_hooks.evaluate = nullptr;
    return side_hooks;
  };
  if (config.repeats < 1) fail(ErrorCategory::usage, "--repeat must be at least 1");
  // Interleaved (A B A B ...): a load that comes and goes hits both sides rather than one.
  std::vector<TrainResult> baselines, optimizeds;
  for (int repeat = 0; repeat < config.repeats; ++repeat) {
    baselines.push_back(run_training(for_repeat(baseline, repeat), dataset, hooks_for(baseline)));
    optimizeds.push_back(run_training(for_repeat(optimized, repeat), dataset, hooks_for(optimized)));
    if (repeat > 0) baselines.back().model = optimizeds.back().model = nullptr;  // only the first pair's kept
  }
  result.baseline = baselines.front();
  result.optimized = optimizeds.front();

  Json report;
  report["schema_version"] = kResultsSchemaVersion;
  report["kind"] = "compare";
  report["model"] = result.baseline.report["model"];
  report["dataset"] = result.baseline.report["dataset"];
  report["environment"] = hooks.environment;
  report["target_acc"] = baseline.target_acc;
  const std::vector<std::uint64_t>& tuned_on = tuning_seeds();
  report["seeds"] = Json::array({config.seed});
  report["tuning_seeds"] = tuned_on;
  report["held_out"] = std::find(tuned_on.begin(), tuned_on.end(), config.seed) == tuned_on.end();
  report["optimized_recipe"] = config.optimized_recipe_override.is_null()
                                   ? "hand-tuned (ipj compare's built-in recipe)"
                                   : "recipe " + config.optimized_recipe_source;
  report["baseline"] = side(result.baseline, baseline);
  report["optimized"] = side(result.optimized, optimized);
  // Copies: adding keys to an ordered_json moves its elements, so references into `report` would dangle.
  const Json base = report["baseline"];
  const Json tuned = report["optimized"];
  // Speed-up and energy ratio at the target when both reached it; otherwise null (reported, not hidden).
  // The recipe effect: optimized vs seed recipe, both in ipj ("speedup" is the same figure, kept for older
  // readers). The implementation effect: ipj vs the Python loop, both the seed recipe, samples/s. Their
  // product estimates the optimized recipe in ipj against the seed loop in Python.
  const Json recipe_speedup = ratio_or_null(base["time_to_target_s"], tuned["time_to_target_s"]);
  const Json implementation_speedup =
      result.python.is_null() ? Json(nullptr)
                              : ratio_or_null(base["samples_per_s"], result.python["samples_per_s"]);
  report["speedup"] = recipe_speedup;
  report["recipe_speedup"] = recipe_speedup;
  report["python_baseline"] = result.python;
  report["implementation_speedup"] = implementation_speedup;
  report["total_speedup"] = recipe_speedup.is_number() && implementation_speedup.is_number()
                                ? Json(recipe_speedup.get<double>() * implementation_speedup.get<double>())
                                : Json(nullptr);
  report["energy_ratio"] = ratio_or_null(tuned["energy_to_target_j"], base["energy_to_target_j"]);
  report["throughput_ratio"] = ratio_or_null(tuned["samples_per_s"], base["samples_per_s"]);
  const double delta_pt = (tuned["test_acc"].get<double>() - base["test_acc"].get<double>()) * 100.0;
  report["acc_delta_pt"] = delta_pt;
  report["within_half_point"] = delta_pt >= -0.5;  // the seeds' rule: no more than 0.5 pt worse
  // The built-in recipe's rate was tuned on ipj's own mlp and cnn: a user's model can diverge under it (a
  // concat/residual net ended 46 points below the seed recipe at lr 0.05)
  report["accuracy_advice"] =
      delta_pt < -0.5 && config.model.is_file() && config.optimized_recipe_override.is_null()
          ? Json("the optimized recipe's learning rate (" +
                 std::to_string(optimized.learning_rate).substr(0, 5) + ", tuned for ipj's own " +
                 (defaults_for(config.model).convolutional ? "cnn" : "mlp") +
                 ") may not suit this model: give --optimized-recipe a recipe with a smaller lr, or let "
                 "`ipj tune` find one")
          : Json(nullptr);
  add_noise_records(report, baselines, optimizeds);
  if (!config.out_dir.empty())
    write_json_file((std::filesystem::path(config.out_dir) / "compare.json").string(), report);
  result.report = std::move(report);
  return result;
}

std::string render_compare_table(const Json& report) {
  const Json& base = report["baseline"];
  const Json& tuned = report["optimized"];
  const std::string target = number(report["target_acc"], "%.3f");
  const bool from_file = report.value("optimized_recipe", std::string()).rfind("recipe ", 0) == 0;
  TextTable table({"", "baseline (seed recipe)", from_file ? "optimized (recipe file)" : "optimized (ipj)",
                   "optimized vs baseline"});
  table.add_row({"final test accuracy", number(base["test_acc"], "%.4f"), number(tuned["test_acc"], "%.4f"),
                 number(report["acc_delta_pt"], "%+.2f pt")});
  table.add_row({"time to " + target, number(base["time_to_target_s"], "%.2f s"),
                 number(tuned["time_to_target_s"], "%.2f s"),
                 number(report["speedup"], "%.2fx faster", "n/a")});
  table.add_row({"energy to " + target, number(base["energy_to_target_j"], "%.1f J"),
                 number(tuned["energy_to_target_j"], "%.1f J"),
                 number(report["energy_ratio"], "%.2fx the energy", "n/a")});
  table.add_row({"energy source", base["energy_source"].get<std::string>(),
                 tuned["energy_source"].get<std::string>(), ""});
  table.add_row({"training samples/s", number(base["samples_per_s"], "%.0f"),
                 number(tuned["samples_per_s"], "%.0f"), number(report["throughput_ratio"], "%.2fx")});
  if (report.value("python_baseline", Json(nullptr)).is_object())
    table.add_row(
        {"Python seed loop samples/s", number(report["python_baseline"]["samples_per_s"], "%.0f"), "", ""});
  table.add_row(
      {"accuracy per kJ", number(base["acc_per_kj"], "%.3f"), number(tuned["acc_per_kj"], "%.3f"), ""});
  table.add_row(
      {"precision", base["precision"].get<std::string>(), tuned["precision"].get<std::string>(), ""});
  table.add_row({"epochs run", number(base["epochs_completed"], "%.0f"),
                 number(tuned["epochs_completed"], "%.0f"), ""});
  std::string text = table.render() + noise_lines(report);
  text += "recipe effect (optimized vs seed recipe, both in ipj): " +
          number(report.value("recipe_speedup", report["speedup"]), "%.2fx faster to the target",
                 "n/a (a side missed the target)") +
          "\n";
  text += "implementation effect (ipj vs the Python loop, seed recipe, samples/s): " +
          number(report.value("implementation_speedup", Json(nullptr)), "%.2fx",
                 "not measured (--python-baseline)") +
          "\n";
  if (report.value("total_speedup", Json(nullptr)).is_number())
    text += "both together (product): " + number(report["total_speedup"], "%.2fx") + "\n";
  if (!report.contains("seeds")) return text;  // a compare.json from before the seeds were recorded
  std::string seeds;
  for (const auto& seed : report["seeds"])
    seeds += (seeds.empty() ? "" : ", ") + std::to_string(seed.get<std::uint64_t>());
  text += "seed " + seeds +
          (report.value("held_out", false)
               ? " (held out: the recipes were tuned on seeds 0, 1, 2)\n"
               : " (a tuning seed: the recipes were tuned on seeds 0, 1, 2; use --seed 3 "
                 "or higher for a held-out figure)\n");
  text += report["within_half_point"].get<bool>()
              ? "accuracy: within the seeds' 0.5-point rule\n"
              : "accuracy: the optimized recipe is more than 0.5 point worse (fails the seeds' rule)\n";
  if (const Json& advice = report.value("accuracy_advice", Json(nullptr)); advice.is_string())
    text += "  " + advice.get<std::string>() + "\n";
  return text;
}

}  // namespace ipj::train
