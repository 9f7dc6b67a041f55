// `ipj train`: trains a registry model on an image data set and writes results (see docs/CLI.md). The setting
// flags come from the settings table (train_flags.hpp); this file adds the run's own flags, runs and prints.
#include <chrono>
#include <iostream>
#include <optional>

#include "cli_support.hpp"
#include "ipj/core/atomic_file.hpp"
#include "ipj/core/progress.hpp"
#include "ipj/data/dataset.hpp"
#include "ipj/device/device_report.hpp"
#include "ipj/dist/data_parallel_training.hpp"
#include "ipj/infer/compiled_evaluation.hpp"
#include "ipj/train/precision.hpp"
#include "ipj/train/recipe.hpp"
#include "ipj/train/repeat.hpp"
#include "ipj/train/trainer.hpp"
#include "train_flags.hpp"

namespace ipj::cli {
namespace {

// --distributed: this process's place in the job (torchrun's variables) and its c10d settings.
struct DistributedFlags {
  bool enabled = false;
  std::string backend = "auto";
  double timeout_s = 120.0;
};

void add_distributed_flags(CLI::App& command, DistributedFlags& distributed) {
  command.add_flag("--distributed", distributed.enabled,
                   "Data-parallel training as one rank of a job started by `ipj launch`, torchrun, SLURM or "
                   "Kubernetes (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; docs/DISTRIBUTED.md); --batch is "
                   "the global batch");
  command.add_option("--dist-backend", distributed.backend, "gloo | nccl | auto (nccl for --device cuda)")
      ->check(CLI::IsMember({"gloo", "nccl", "auto"}))
      ->capture_default_str();
  command
      .add_option("--dist-timeout-s", distributed.timeout_s,
                  "Seconds to wait for the other ranks (rendezvous and every collective)")
      ->check(finite_range(1.0, 86400.0))
      ->capture_default_str();
}

// Everything `ipj train` parses into: the settings (train::TrainConfig and the texts of composite ones) and
// the run's own flags.
struct TrainFlags {
  CommonOutputFlags output;
  train::TrainConfig config;
  TrainFlagTexts texts;
  bool no_save = false;
  int repeat = 1;
  DistributedFlags distributed;
  std::string recipe_path;
};

// The settings from the flags, the recipe file (flags given win) and the default run folder.
train::TrainConfig resolve_config(TrainFlags& flags, const CLI::App& command) {
  train::TrainConfig config = flags.config;
  if (flags.no_save && (config.resume || !config.out_dir.empty()))
    throw ipj::Error(ipj::ErrorCategory::usage, "--no-save cannot be combined with --out or --resume");
  config.model = parse_model_flags(flags.texts.model, flags.texts.input_shape);
  if (!flags.recipe_path.empty()) {
    const Json recipe = train::read_recipe_file(flags.recipe_path);
    config = train::apply_recipe(config, recipe, given_setting_keys(command));
    check_model_against_recipe(command, recipe, flags.recipe_path, config.model);
  }
  if (!flags.no_save && config.out_dir.empty())
    config.out_dir = default_run_folder(models::short_name(config.model));
  apply_device_and_data_flags(config, flags.texts);  // --device (given or not) wins over a recipe's device
  return config;
}

train::TrainHooks make_hooks(const TrainFlags& flags, const train::TrainConfig& config, bool primary) {
  train::TrainHooks hooks;
  hooks.show_progress = !flags.output.quiet && primary;
  hooks.environment = device::device_report();
  if (config.compile == train::CompileMode::jit) {
    hooks.evaluate = [zoo_name = config.model.zoo_name](models::Classifier& model, const data::Dataset& data,
                                                        std::int64_t batch) {
      return infer::evaluate_compiled(model, zoo_name, data, batch);
    };
  }
  hooks.on_epoch_end = [quiet = flags.output.json || !primary](const train::EpochMetrics& metrics) {
    if (quiet) return;
    std::printf("epoch %d  loss %.4f  train acc %.4f  test acc %.4f  %s samples/s  %s  %.1f J (%s)\n",
                metrics.epoch, metrics.loss, metrics.train_acc, metrics.test_acc,
                format_count(metrics.samples_per_s).c_str(), format_duration(metrics.wall_s).c_str(),
                metrics.energy_j, energy::reported_source_name(metrics.energy_source).c_str());
    std::fflush(stdout);
  };
  return hooks;
}

void print_repeat_summary(const Json& report, int repeat) {
  const Json& summary = report["summary"];
  auto show = [](const Json& spread, const char* unit) {
    if (spread.is_null()) return std::string("none reached");
    char text[96];
    std::snprintf(text, sizeof text, "median %.4g%s (range %.4g-%.4g)", spread["median"].get<double>(), unit,
                  spread["min"].get<double>(), spread["max"].get<double>());
    return std::string(text);
  };
  std::printf("%d runs: test acc %s; time to target %s; energy to target %s; missed the target: %d\n", repeat,
              show(summary["test_acc"], "").c_str(), show(summary["time_to_target_s"], " s").c_str(),
              show(summary["energy_to_target_j"], " J").c_str(), summary["missed_target"].get<int>());
}

void print_final(const train::TrainResult& result, const train::TrainConfig& config) {
  std::printf(
      "final: test acc %.4f  %.0f samples/s  wall %s (training %s)  energy %.1f J (%s), %.3g "
      "J/sample\n",
      result.test_acc, result.samples_per_s, format_duration(result.wall_s).c_str(),
      format_duration(result.train_wall_s).c_str(), result.energy_j,
      energy::reported_source_name(result.energy_source).c_str(),
      result.samples > 0 ? result.energy_j / result.samples : 0.0);
  if (!config.out_dir.empty()) std::printf("results: %s/results.json\n", config.out_dir.c_str());
  if (!config.out_dir.empty() && config.model.is_file())
    std::printf("trained TorchScript: %s/model.pt (takes images normalised with the data set's mean/std)\n",
                config.out_dir.c_str());
}

int run_train(const TrainFlags& flags, train::TrainConfig config) {
  std::optional<dist::DistributedEnvironment> job;  // set with --distributed
  if (flags.distributed.enabled) {
    if (flags.repeat > 1)
      throw ipj::Error(ipj::ErrorCategory::usage, "--repeat cannot be combined with --distributed");
    job = dist::read_distributed_environment();
    config = dist::data_parallel_config(config, *job);
  }
  const bool primary = !job || job->is_primary();  // prints and writes; the other ranks stay quiet
  train::validate(config);
  if (primary) require_writable_folder(config.out_dir, "--out");  // before any work, not after an epoch
  if (config.compile == train::CompileMode::jit) infer::require_compilable(config.model.zoo_name);
  train::resolve_precision_here(config.precision, config.device);  // fail before loading data (fp16 on a CPU)
  const data::Dataset dataset =
      data::load_dataset(config.data_dir, config.limit, config.test_limit, config.data_options);
  if (!flags.output.quiet && primary) std::cerr << "data: " << data::describe(dataset) << "\n";
  const train::TrainHooks hooks = make_hooks(flags, config, primary);
  if (flags.repeat > 1) {
    const Json report = train::run_repeated(config, flags.repeat, dataset, hooks);
    if (flags.output.json)
      print_json(report);
    else
      print_repeat_summary(report, flags.repeat);
    return 0;
  }
  const auto timeout =
      std::chrono::milliseconds(static_cast<std::int64_t>(flags.distributed.timeout_s * 1000.0));
  const train::TrainResult result =
      job ? dist::run_data_parallel_training(
                config, dataset, hooks, *job,
                {dist::parse_backend(flags.distributed.backend, config.device.cuda), timeout})
          : train::run_training(config, dataset, hooks);
  if (!primary) return 0;
  if (flags.output.json)
    print_json(result.report);
  else
    print_final(result, config);
  return 0;
}

}  // namespace

CLI::App* register_train_command(CLI::App& app, CommandRunner& runner) {
  auto* command = app.add_subcommand(
      "train",
      "Train a model on Fashion-MNIST (default) or any MNIST-format / CIFAR-10 folder\n"
      "Example: ipj train --model cnn --epochs 2 --batch 128 --lr 0.01 --out runs/cnn --json");
  static TrainFlags flags;
  add_output_flags(*command, flags.output);
  add_train_setting_flags(*command, flags.config, flags.texts,
                          {{"--resume", [command] {
                              command->add_flag("--no-save", flags.no_save,
                                                "Write no checkpoint or results file");
                              command
                                  ->add_option("--repeat", flags.repeat,
                                               "Run K seeds (seed, seed+1, ...) and report median and range")
                                  ->check(positive_integer(100));
                            }}});
  add_distributed_flags(*command, flags.distributed);
  command->add_option("--recipe", flags.recipe_path,
                      "Recipe file (ipj tune's recipe.json): its settings replace the defaults; flags given "
                      "here override the recipe");
  command->callback([&runner, command] {
    runner = [command] { return run_train(flags, resolve_config(flags, *command)); };
  });
  return command;
}

}  // namespace ipj::cli
