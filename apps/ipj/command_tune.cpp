// `ipj tune`: searches for the recipe that reaches a target accuracy with the fewest joules (docs/TUNE.md).
// Parses flags (and, with --resume, the run's saved settings), builds the space and the runner, prints.
#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli_support.hpp"
#include "ipj/core/progress.hpp"
#include "ipj/data/dataset.hpp"
#include "ipj/device/device_report.hpp"
#include "ipj/energy/power_limit.hpp"
#include "ipj/infer/compiled_evaluation.hpp"
#include "ipj/models/catalog.hpp"
#include "ipj/models/registry.hpp"
#include "ipj/train/compare.hpp"
#include "ipj/train/precision.hpp"
#include "ipj/tune/training_runner.hpp"
#include "ipj/tune/tuner.hpp"

namespace ipj::cli {
namespace {

struct TuneFlags {
  std::string model = "mlp";
  std::string input_shape;  // TorchScript --model: C,H,W or N (empty: the data's images)
  std::string data_dir = data::kDefaultDataDirectory;
  double target_acc = 0.0;
  double budget_s = 0.0;
  double budget_j = 0.0;
  int max_trials = 0;
  int heldout = 3;
  int confirm = 3;
  std::string space_file;
  bool print_space = false;
  std::string out_dir;
  bool resume = false;
  std::uint64_t seed = 0;
  std::int64_t limit = 0;
  std::int64_t test_limit = 0;
  std::string device = "cpu";
  bool allow_power_limit = false;
  double cpu_tdp_w = 0.0;
  int energy_interval_ms = 100;
};

bool jit_evaluation_available(const std::string& model) {
  try {
    infer::require_compilable(model);
    return true;
  } catch (const Error&) {
    return false;
  }
}

bool is_zoo_name(const std::string& model) {
  for (const auto& entry : models::model_catalog())
    if (entry.name == model) return true;
  return false;
}

// A path as tune_settings.json records it: absolute, so that --resume works from any folder.
std::string absolute_path(const std::string& path) {
  std::error_code error;
  std::filesystem::path absolute = std::filesystem::absolute(path, error).lexically_normal();
  if (error) return path;
  if (!absolute.has_filename() && absolute.has_parent_path()) absolute = absolute.parent_path();  // "data/"
  return absolute.string();
}

// --model as recorded: a zoo name as it is, an existing file by its absolute path (anything else is left
// for parse_model_source to refuse with its own message).
std::string model_as_recorded(const std::string& model) {
  return is_zoo_name(model) || !std::filesystem::exists(model) ? model : absolute_path(model);
}

// --resume: a saved --model file or --data folder must be found from here. Runs recorded before ipj
// saved absolute paths may hold relative ones, which only work from the folder where the run started.
void require_reachable(const std::string& flag, const std::string& saved_path, const std::string& path,
                       bool model) {
  if ((model && is_zoo_name(saved_path)) || std::filesystem::path(saved_path).is_absolute() ||
      std::filesystem::exists(saved_path))
    return;
  fail(ErrorCategory::usage, "--resume: " + path + " records " + flag + " as the relative path '" +
                                 saved_path + "', which does not exist from this folder (" +
                                 std::filesystem::current_path().string() +
                                 "): run `ipj tune --resume` from the folder where the run started");
}

// --resume: the saved settings define the run; a flag given again must agree with them (the budget, the
// trial cap and the held-out runs may change).
void adopt_saved_settings(const CLI::App& command, TuneFlags& flags, Json& saved_space) {
  const std::string path = (std::filesystem::path(flags.out_dir) / tune::kSettingsName).string();
  if (!std::filesystem::exists(path))
    fail(ErrorCategory::usage, "--resume: " + path + " does not exist; start the run without --resume first");
  const Json saved = read_json_file(path);
  for (const char* key : {"model", "data", "limit", "test_limit", "device", "target_acc", "seed", "cpu_tdp_w",
                          "allow_power_limit", "budget", "space"})
    if (!saved.contains(key))
      fail(ErrorCategory::invalid_input,
           path + " has no \"" + key + "\": it was not written by ipj tune; start a new --out folder");
  auto adopt = [&](const char* flag, const char* key, auto& field) {
    using Field = std::decay_t<decltype(field)>;
    const Field value = saved.at(key).get<Field>();
    if (command.count(flag) > 0 && !(value == field))
      fail(ErrorCategory::usage, std::string("--resume: ") + flag + " was " + saved[key].dump() +
                                     " in this run; drop the flag or start a new --out folder");
    field = value;
  };
  // --model and --data given again name the same file or folder when their absolute paths agree.
  auto adopt_path = [&](const char* flag, const char* key, std::string& field, bool model) {
    const std::string value = saved.at(key).get<std::string>();
    auto same_place = [&](const std::string& text) {
      return model && is_zoo_name(text) ? text : absolute_path(text);
    };
    if (command.count(flag) > 0 && same_place(field) != same_place(value))
      fail(ErrorCategory::usage, std::string("--resume: ") + flag + " was " + saved[key].dump() +
                                     " in this run; drop the flag or start a new --out folder");
    require_reachable(flag, value, path, model);
    field = value;
  };
  adopt_path("--model", "model", flags.model, true);
  if (saved.contains("input_shape")) adopt("--input-shape", "input_shape", flags.input_shape);
  adopt_path("--data", "data", flags.data_dir, false);
  adopt("--limit", "limit", flags.limit);
  adopt("--test-limit", "test_limit", flags.test_limit);
  adopt("--device", "device", flags.device);
  adopt("--target-acc", "target_acc", flags.target_acc);
  adopt("--seed", "seed", flags.seed);
  adopt("--cpu-tdp-w", "cpu_tdp_w", flags.cpu_tdp_w);
  adopt("--allow-power-limit", "allow_power_limit", flags.allow_power_limit);
  if (command.count("--budget-s") == 0 && command.count("--budget-j") == 0) {
    const Json& budget = saved.at("budget");
    (budget.at("unit") == "s" ? flags.budget_s : flags.budget_j) = budget.at("limit").get<double>();
  }
  if (command.count("--max-trials") == 0) flags.max_trials = saved.value("max_trials", 0);
  if (command.count("--heldout") == 0) flags.heldout = saved.value("heldout", 3);
  if (command.count("--confirm") == 0) flags.confirm = saved.value("confirm", 3);
  saved_space = saved.at("space");
  if (saved.contains("model_file")) {  // a TorchScript file: the trials so far trained these bytes
    const models::FileFingerprint now = models::fingerprint_file(flags.model);
    if (saved["model_file"].value("xxh3_64", "") != now.xxh3_64 ||
        saved["model_file"].value("bytes", std::int64_t{-1}) != now.bytes)
      fail(ErrorCategory::usage, "--resume: model file " + flags.model +
                                     " changed since this run started (its size or XXH3 hash differs from " +
                                     path + "); start a new --out folder");
  }
}

tune::SearchSpace resolve_space(const TuneFlags& flags, const tune::SpaceContext& context,
                                const Json& saved_space) {
  if (saved_space.is_null())
    return flags.space_file.empty() ? tune::default_space(context)
                                    : tune::read_space_file(flags.space_file, context);
  const tune::SearchSpace saved =
      tune::parse_space(saved_space, context, "saved in " + flags.out_dir + "/" + tune::kSettingsName);
  if (!flags.space_file.empty() &&
      tune::to_json(tune::read_space_file(flags.space_file, context)) != tune::to_json(saved))
    fail(ErrorCategory::usage, "--resume: --space " + flags.space_file +
                                   " differs from the space this run searches; drop --space to continue it");
  return saved;
}

// Power-limit safety before anything else: a restore file from a killed run is honoured (or reported).
std::unique_ptr<energy::PowerLimitControl> open_power_limit(const TuneFlags& flags) {
  const std::string restore_file =
      (std::filesystem::path(flags.out_dir) / "power_limit_restore.json").string();
  if (!flags.allow_power_limit) {
    const std::string left = energy::describe_restore_file(restore_file);
    if (!left.empty())
      std::cerr << "ipj: warning: " << left << "; run again with --allow-power-limit to restore it\n";
    return nullptr;
  }
  if (flags.device.rfind("cuda", 0) != 0)
    fail(ErrorCategory::usage,
         "--allow-power-limit tunes the NVML power limit of the GPU that trains: use it with "
         "--device cuda (this run trains on " +
             flags.device + ")");
  const std::string restored = energy::restore_power_limit_from_file("", restore_file);
  if (!restored.empty()) std::cerr << "ipj: " << restored << "\n";
  return std::make_unique<energy::PowerLimitControl>("", flags.device, restore_file);
}

Json settings_json(const TuneFlags& flags, const models::ModelSource& model, const tune::Budget& budget,
                   const tune::SearchSpace& space) {
  Json settings{
      {"schema_version", kResultsSchemaVersion},
      {"kind", "tune-settings"},
      {"model", flags.model},
      {"input_shape", flags.input_shape},
      {"data", flags.data_dir},
      {"limit", flags.limit},
      {"test_limit", flags.test_limit},
      {"device", flags.device},
      {"target_acc", flags.target_acc},
      {"seed", flags.seed},
      {"cpu_tdp_w", flags.cpu_tdp_w},
      {"allow_power_limit", flags.allow_power_limit},
      {"budget", {{"unit", budget.unit == tune::BudgetUnit::seconds ? "s" : "J"}, {"limit", budget.limit}}},
      {"max_trials", flags.max_trials},
      {"heldout", flags.heldout},
      {"confirm", flags.confirm},
      {"space", tune::to_json(space)}};
  if (model.is_file()) {  // --resume refuses a file that changed; recipe.json's provenance keeps it too
    const models::FileFingerprint fingerprint = models::fingerprint_file(model.file);
    settings["model_file"] = {{"bytes", fingerprint.bytes}, {"xxh3_64", fingerprint.xxh3_64}};
  }
  return settings;
}

int run_tune_command(const CLI::App& command, TuneFlags& flags, const CommonOutputFlags& output) {
  Json saved_space;
  if (flags.resume) {
    if (flags.out_dir.empty())
      fail(ErrorCategory::usage, "--resume needs --out DIR (the tune run to continue)");
    adopt_saved_settings(command, flags, saved_space);
  } else {  // recorded as absolute paths: --resume and the recipe work from any folder
    flags.model = model_as_recorded(flags.model);
    flags.data_dir = absolute_path(flags.data_dir);
  }
  train::TrainConfig run_settings;  // what every trial shares; each applies its recipe on top
  run_settings.model = parse_model_flags(flags.model, flags.input_shape);
  run_settings.data_dir = flags.data_dir;
  run_settings.limit = flags.limit;
  run_settings.test_limit = flags.test_limit;
  run_settings.device = train::parse_device(flags.device, "--device");
  run_settings.cpu_tdp_w = flags.cpu_tdp_w;
  run_settings.energy_interval_ms = flags.energy_interval_ms;
  train::validate(run_settings);  // the model, limits, device and energy flags, as ipj train checks them
  if (run_settings.device.cuda)
    train::resolve_precision_here(train::Precision::fp32, run_settings.device);  // fails early without CUDA
  const tune::SpaceContext context =
      tune::make_space_context(run_settings.model, flags.device, flags.allow_power_limit,
                               !run_settings.model.is_file() && jit_evaluation_available(flags.model));
  const tune::SearchSpace space = resolve_space(flags, context, saved_space);
  if (flags.print_space) {
    std::cout << tune::to_json(space).dump(2) << std::endl;
    return 0;
  }
  tune::check_out_folder(flags.out_dir, flags.resume);
  if (flags.target_acc <= 0.0) {
    if (run_settings.model.is_file())
      fail(ErrorCategory::usage,
           "--target-acc is required for a TorchScript --model (" + flags.model + "): e.g. --target-acc 0.9");
    flags.target_acc = train::default_target_accuracy(run_settings.model);
  }
  if (flags.target_acc > 1.0) fail(ErrorCategory::usage, "--target-acc must be a fraction in (0, 1]");
  tune::Budget budget;
  if (flags.budget_j > 0.0) budget = {tune::BudgetUnit::joules, flags.budget_j};
  if (flags.budget_s > 0.0) budget = {tune::BudgetUnit::seconds, flags.budget_s};
  const std::unique_ptr<energy::PowerLimitControl> power_limit = open_power_limit(flags);

  const auto load_start = std::chrono::steady_clock::now();
  const data::Dataset dataset = data::load_dataset(flags.data_dir, flags.limit, flags.test_limit);
  if (!output.quiet)
    std::cerr << "data: " << data::describe(dataset) << " (loaded in "
              << format_duration(
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count())
              << ", not counted in the budget)\n";
  if (run_settings.model.is_file())  // a file that does not fit the data fails here once, not in every trial
    (void)models::build_classifier(run_settings.model,
                                   {dataset.train.channels, dataset.train.height, dataset.train.width},
                                   dataset.num_classes);
  train::TrainHooks hooks;
  hooks.environment = device::device_report();
  const std::string model = flags.model;
  hooks.evaluate = [model](models::Classifier& network, const data::Dataset& data, std::int64_t batch) {
    return infer::evaluate_compiled(network, model, data, batch);
  };
  tune::TrainingTrialRunner runner(run_settings, dataset, hooks);

  tune::TuneOptions options;
  options.out_dir = flags.out_dir;
  options.target_acc = flags.target_acc;
  options.seed = flags.seed;
  options.budget = budget;
  options.max_trials = flags.max_trials;
  options.heldout_runs = flags.heldout;
  options.confirm_top = flags.confirm;
  options.resume = flags.resume;
  options.show_progress = !output.quiet;
  options.settings = settings_json(flags, run_settings.model, budget, space);
  if (power_limit)
    options.apply_power_limit = [&power_limit](double fraction) {
      return power_limit->set_fraction(fraction);
    };
  const Json report = tune::run_tune(options, space, runner);
  if (output.json) {
    print_json(report);
  } else {
    std::cout << data::describe(dataset) << "\n" << tune::render_tune_report(report);
  }
  return 0;
}

}  // namespace

CLI::App* register_tune_command(CLI::App& app, CommandRunner& runner) {
  auto* command =
      app.add_subcommand("tune",
                         "Search for the training recipe that reaches a target accuracy with the fewest "
                         "joules; writes DIR/recipe.json\n"
                         "Example: ipj tune --model mlp --budget-s 300 --out runs/tune-mlp --json");
  static CommonOutputFlags output;
  static TuneFlags flags;
  add_output_flags(*command, output);
  command
      ->add_option("--model", flags.model,
                   "mlp | cnn | resnet18 | resnet50, or a TorchScript file (then --target-acc is required)")
      ->capture_default_str();
  command->add_option("--input-shape", flags.input_shape, kInputShapeHelp);
  command->add_option("--data", flags.data_dir, "Data folder (IDX .gz/plain or CIFAR-10 binary)")
      ->capture_default_str();
  command
      ->add_option("--target-acc", flags.target_acc,
                   "Target test accuracy (0 = the model's default: mlp 0.88, cnn 0.90)")
      ->check(probability());
  auto* seconds = command->add_option("--budget-s", flags.budget_s,
                                      "Budget in trial seconds, held-out runs included (default 300)");
  auto* joules =
      command->add_option("--budget-j", flags.budget_j, "Budget in trial joules instead of seconds");
  seconds->excludes(joules);
  seconds->check(positive_number(1e9));
  joules->check(positive_number(1e12));
  command->add_option("--max-trials", flags.max_trials, "Stop the search after N trials (0 = budget only)")
      ->check(non_negative_integer(100000));
  command->add_option("--heldout", flags.heldout, "Held-out seeds the winner is re-run on")
      ->check(non_negative_integer(10))
      ->capture_default_str();
  command
      ->add_option("--confirm", flags.confirm,
                   "The best N trials are re-run on a second seed (seed+100); the winner is chosen on both")
      ->check(non_negative_integer(10))
      ->capture_default_str();
  command->add_option("--space", flags.space_file, "Search-space file (docs/TUNE.md; see --print-space)");
  command->add_flag("--print-space", flags.print_space, "Print the search space as a space file and exit");
  command->add_option("--out", flags.out_dir, "Folder for trials.jsonl, recipe.json and tune.json");
  command->add_flag("--resume", flags.resume, "Continue the run in --out (finished trials are not re-run)");
  command
      ->add_option("--seed", flags.seed,
                   "Seed of the search and of the trials' training (held-out: seed+1..)")
      ->check(seed_value())
      ->capture_default_str();
  command->add_option("--limit", flags.limit, "First N training samples (0 = all)")
      ->check(non_negative_integer(kMaxSamples));
  command->add_option("--test-limit", flags.test_limit, "First N test samples (0 = all)")
      ->check(non_negative_integer(kMaxSamples));
  command->add_option("--device", flags.device, "cpu | cuda | cuda:N")->capture_default_str();
  command->add_flag("--allow-power-limit", flags.allow_power_limit,
                    "GPUs: also search the NVML power limit (restored on exit and on SIGINT/SIGTERM/SIGHUP)");
  command->add_option("--cpu-tdp-w", flags.cpu_tdp_w, "CPU power for the energy estimate (0 = default)")
      ->check(finite_range(0.0, 1e5));
  command->add_option("--energy-interval-ms", flags.energy_interval_ms, "Energy meter sampling period")
      ->check(positive_integer(10000))
      ->capture_default_str();
  command->callback(
      [&runner, command] { runner = [command] { return run_tune_command(*command, flags, output); }; });
  return command;
}

}  // namespace ipj::cli
