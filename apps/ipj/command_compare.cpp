// `ipj compare`: the seeds' case study, baseline recipe vs ipj's optimized recipe, side by side (the main
// job). The CLI parses flags (add_compare_flags), builds the CompareConfig and prints; train::run_compare
// runs.
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "choice_flags.hpp"
#include "cli_support.hpp"
#include "ipj/core/atomic_file.hpp"
#include "ipj/device/device_report.hpp"
#include "ipj/infer/compiled_evaluation.hpp"
#include "ipj/report/report.hpp"
#include "ipj/train/compare.hpp"
#include "ipj/train/recipe.hpp"

namespace ipj::cli {
namespace {

struct CompareFlags {
  CommonOutputFlags output;
  train::CompareConfig config;
  DataFlags data;
  std::string model = "mlp";
  std::string input_shape;
  bool write_report = false;
  bool python_baseline = false;
  std::string python = train::PythonBaseline{}.python;
  std::string recipe_path;
  train::Precision precision = train::Precision::automatic;
};

// The seeds' Python loop of this source tree, unless IPJ_SEED_TRAIN_LOOP names another.
std::string seed_train_loop_script() {
  const char* path = std::getenv("IPJ_SEED_TRAIN_LOOP");
  return path != nullptr && *path != '\0' ? path : IPJ_SOURCE_DIR "/bench/python/seed_train_loop.py";
}

// The model, data and budget flags: what both sides train.
void add_compare_run_flags(CLI::App& command, CompareFlags& flags) {
  train::CompareConfig& config = flags.config;
  command
      .add_option("--model", flags.model,
                  "mlp | cnn | resnet18 | resnet50, or a TorchScript file (both recipes train it)")
      ->capture_default_str();
  command.add_option("--input-shape", flags.input_shape, kInputShapeHelp);
  command.add_option("--data", config.data_dir, "Data folder (IDX, CIFAR-10 binary or image folder)")
      ->capture_default_str();
  add_data_flags(command, flags.data, true);
  command.add_option("--target-acc", config.target_acc, "Target test accuracy (0 = model default: mlp 0.88)")
      ->check(finite_range(0.0, 0.9999));
  command.add_option("--max-epochs", config.baseline_max_epochs, "Baseline epoch cap (0 = model default)")
      ->check(non_negative_integer(1000000));
  command
      .add_option("--epochs", config.optimized_epochs,
                  "Optimized recipe's schedule length (0 = model default)")
      ->check(non_negative_integer(1000000));
  command
      .add_option("--seed", config.seed,
                  "Seed for both runs (0, 1, 2 tuned the recipes: 3 or higher is held out)")
      ->check(seed_value())
      ->capture_default_str();
  command.add_option("--limit", config.limit, "First N training samples (0 = all)")
      ->check(non_negative_integer(kMaxSamples));
  command.add_option("--test-limit", config.test_limit, "First N test samples (0 = all)")
      ->check(non_negative_integer(kMaxSamples));
  command.add_option("--threads", config.threads, "Cores to use (0 = all)")
      ->check(non_negative_integer(4096));
  command.add_option("--out", config.out_dir,
                     "Folder for compare.json and the two run folders (default runs/)");
}

// The flags that change a side's recipe or what is written besides compare.json.
void add_compare_recipe_flags(CLI::App& command, CompareFlags& flags) {
  command.add_flag(
      "--python-baseline", flags.python_baseline,
      "Also run the seed recipe in the seeds' Python loop (one epoch, mlp/cnn) for the "
      "implementation speed-up (bench/python/seed_train_loop.py; IPJ_SEED_TRAIN_LOOP overrides)");
  command.add_option("--python", flags.python, "Python with torch for --python-baseline")
      ->capture_default_str();
  command.add_option(
      "--optimized-recipe", flags.recipe_path,
      "Recipe file (ipj tune's recipe.json) to run as the optimized side instead of the "
      "hand-tuned recipe; --model, --target-acc, --epochs and --threads given here override it");
  command.add_flag("--report", flags.write_report,
                   "Also write report.html (charts, tables) next to compare.json");
  command
      .add_option("--repeat", flags.config.repeats,
                  "Run the two sides alternately N times (baseline, optimized, baseline, ...) and report the "
                  "spread; the headline figures are the first pair's")
      ->check(positive_integer(100))
      ->capture_default_str();
  add_choice_option(command, "--precision", flags.precision,
                    "The optimized side's precision: fp32 | bf16 | fp16 | auto (the seed recipe is fp32); a "
                    "model that fails in bf16 falls back to fp32 with a warning");
}

// The parsed flags as a CompareConfig (a --optimized-recipe file read and checked against --model).
void resolve_compare_config(const CLI::App& command, CompareFlags& flags) {
  train::CompareConfig& config = flags.config;
  config.model = parse_model_flags(flags.model, flags.input_shape);
  if (command.count("--precision") > 0) config.precision = flags.precision;
  if (flags.python_baseline)
    config.python_baseline = train::PythonBaseline{flags.python, seed_train_loop_script()};
  if (!flags.recipe_path.empty()) {
    config.optimized_recipe_override = train::read_recipe_file(flags.recipe_path);
    config.optimized_recipe_source = "'" + flags.recipe_path + "'";
    const Json& recipe = config.optimized_recipe_override;
    if (command.count("--model") == 0 && recipe.contains("model"))
      config.model = train::apply_recipe(train::TrainConfig{}, recipe).model;
    check_model_against_recipe(command, recipe, flags.recipe_path, config.model);
    if (command.count("--target-acc") == 0 && recipe.value("target_acc", 0.0) > 0.0)
      config.target_acc = recipe["target_acc"];
  }
  if (config.out_dir.empty())
    config.out_dir = default_run_folder("compare-" + models::short_name(config.model));
  config.data_options = data_options(flags.data);
}

// compare.json (and report.html) are written by now: the table or the JSON object on stdout.
void print_compare_result(const CompareFlags& flags, const data::Dataset& dataset,
                          const train::CompareResult& result) {
  const std::filesystem::path folder(flags.config.out_dir);
  const std::string report_path = (folder / "report.html").string();
  print_warnings(result.report);  // on stderr (the table repeats them)
  if (flags.output.json) {
    Json printed = result.report;
    if (flags.write_report) printed["report"] = report_path;
    print_json(printed);
    return;
  }
  std::cout << data::describe(dataset) << ", model " << flags.config.model.label() << "\n"
            << train::render_compare_table(result.report) << "results: " << flags.config.out_dir
            << "/compare.json\n";
  if (flags.write_report) std::cout << "report: " << report_path << "\n";
}

int run_compare_command(const CLI::App& command, CompareFlags& flags) {
  resolve_compare_config(command, flags);
  const train::CompareConfig& config = flags.config;
  require_writable_folder(config.out_dir, "--out");  // before any work
  const data::Dataset dataset =
      data::load_dataset(config.data_dir, config.limit, config.test_limit, config.data_options);
  train::TrainHooks hooks;
  hooks.show_progress = !flags.output.quiet;
  hooks.environment = device::device_report();
  // Used only by a side whose recipe says --compile jit (run_compare drops it for the others; a recipe
  // file may ask for it: ipj tune searches it).
  const std::string zoo_name = config.model.zoo_name;
  hooks.evaluate = [zoo_name](models::Classifier& network, const data::Dataset& data, std::int64_t batch) {
    return infer::evaluate_compiled(network, zoo_name, data, batch);
  };
  const train::CompareResult result = train::run_compare(config, dataset, hooks);
  if (flags.write_report) {
    const std::filesystem::path folder(config.out_dir);
    report::ReportOptions options;
    options.title = "ipj compare: " + config.model.label();
    options.generator = "ipj 0.1.0";
    write_file_atomically(
        (folder / "report.html").string(),
        report::render_html_report(report::load_sections({(folder / "compare.json").string()}), options));
  }
  print_compare_result(flags, dataset, result);
  return 0;
}

}  // namespace

CLI::App* register_compare_command(CLI::App& app, CommandRunner& runner) {
  auto* command = app.add_subcommand(
      "compare",
      "Train the seed recipe and ipj's optimized recipe to the same target accuracy; compare time, joules, "
      "accuracy per kJ\nExample: ipj compare --model mlp --target-acc 0.88 --json");
  static CompareFlags flags;
  add_output_flags(*command, flags.output);
  add_compare_run_flags(*command, flags);
  add_compare_recipe_flags(*command, flags);
  command->callback(
      [&runner, command] { runner = [command] { return run_compare_command(*command, flags); }; });
  return command;
}

}  // namespace ipj::cli
