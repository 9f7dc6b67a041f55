// `ipj compare`: the seeds' case study, baseline recipe vs ipj's optimized recipe, side by side (the main
// job).
#include <iostream>

#include "cli_support.hpp"
#include "ipj/device/device_report.hpp"
#include "ipj/train/compare.hpp"
#include "ipj/train/recipe.hpp"

namespace ipj::cli {

CLI::App* register_compare_command(CLI::App& app, CommandRunner& runner) {
  auto* command = app.add_subcommand(
      "compare",
      "Train the seed recipe and ipj's optimized recipe to the same target accuracy; compare time, joules, "
      "accuracy per kJ\nExample: ipj compare --model mlp --target-acc 0.88 --json");
  static CommonOutputFlags flags;
  static train::CompareConfig config;
  add_output_flags(*command, flags);
  command->add_option("--model", config.model, "mlp | cnn | resnet18 | resnet50")->capture_default_str();
  command->add_option("--data", config.data_dir, "Data folder")->capture_default_str();
  command->add_option("--target-acc", config.target_acc,
                      "Target test accuracy (0 = model default: mlp 0.88)");
  command->add_option("--max-epochs", config.baseline_max_epochs, "Baseline epoch cap (0 = model default)");
  command->add_option("--epochs", config.optimized_epochs,
                      "Optimized recipe's schedule length (0 = model default)");
  command->add_option("--seed", config.seed, "Seed for both runs")->capture_default_str();
  command->add_option("--limit", config.limit, "First N training samples (0 = all)");
  command->add_option("--test-limit", config.test_limit, "First N test samples (0 = all)");
  command->add_option("--threads", config.threads, "Cores to use (0 = all)");
  command->add_option("--out", config.out_dir,
                      "Folder for compare.json and the two run folders (default runs/)");
  static std::string recipe_path;
  command->add_option(
      "--optimized-recipe", recipe_path,
      "Recipe file (ipj tune's recipe.json) to run as the optimized side instead of the "
      "hand-tuned recipe; --model, --target-acc, --epochs and --threads given here override it");
  command->callback([&runner, command] {
    runner = [command] {
      if (!recipe_path.empty()) {
        config.optimized_recipe_override = train::read_recipe_file(recipe_path);
        config.optimized_recipe_source = "'" + recipe_path + "'";
        const Json& recipe = config.optimized_recipe_override;
        if (command->count("--model") == 0 && recipe.contains("model")) config.model = recipe["model"];
        if (command->count("--target-acc") == 0 && recipe.value("target_acc", 0.0) > 0.0)
          config.target_acc = recipe["target_acc"];
      }
      if (config.out_dir.empty()) config.out_dir = default_run_folder("compare-" + config.model);
      const data::Dataset dataset = data::load_dataset(config.data_dir, config.limit, config.test_limit);
      train::TrainHooks hooks;
      hooks.show_progress = !flags.quiet;
      hooks.environment = device::device_report();
      const train::CompareResult result = train::run_compare(config, dataset, hooks);
      if (flags.json) {
        print_json(result.report);
      } else {
        std::cout << data::describe(dataset) << ", model " << config.model << "\n"
                  << train::render_compare_table(result.report) << "results: " << config.out_dir
                  << "/compare.json\n";
      }
      return 0;
    };
  });
  return command;
}

}  // namespace ipj::cli
