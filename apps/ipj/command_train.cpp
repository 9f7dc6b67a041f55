// `ipj train`: trains a registry model on an image data set and writes results (see docs/CLI.md).
#include <chrono>
#include <iostream>
#include <optional>

#include "choice_flags.hpp"
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

}  // namespace

CLI::App* register_train_command(CLI::App& app, CommandRunner& runner) {
  auto* command = app.add_subcommand(
      "train",
      "Train a model on Fashion-MNIST (default) or any MNIST-format / CIFAR-10 folder\n"
      "Example: ipj train --model cnn --epochs 2 --batch 128 --lr 0.01 --out runs/cnn --json");
  static CommonOutputFlags flags;
  static train::TrainConfig config;
  static bool no_save = false;
  static int repeat = 1;
  static DataFlags data_flags;
  static std::string model = "mlp", input_shape, device = "cpu";
  static DistributedFlags distributed;
  add_output_flags(*command, flags);
  command
      ->add_option("--model", model,
                   "mlp | cnn | resnet18 | resnet50, or a TorchScript file (torch.jit.script/trace .save); "
                   "a file's trained weights go to OUT/model.pt")
      ->capture_default_str();
  command->add_option("--input-shape", input_shape, kInputShapeHelp);
  command
      ->add_option("--data", config.data_dir,
                   "Data folder: IDX (.gz/plain), CIFAR-10 binary, or images in DIR/train/<class>/*.png|jpg "
                   "and DIR/test/<class>/")
      ->capture_default_str();
  add_data_flags(*command, data_flags, true);
  command->add_option("--epochs", config.epochs, "Training epochs")
      ->check(positive_integer(1000000))
      ->capture_default_str();
  command->add_option("--batch", config.batch_size, "Mini-batch size")
      ->check(positive_integer(kMaxBatch))
      ->capture_default_str();
  command->add_option("--lr", config.learning_rate, "Learning rate")
      ->check(positive_number(100.0))
      ->capture_default_str();
  add_choice_option(*command, "--optimizer", config.optimizer, "sgd | adamw");
  command->add_option("--momentum", config.momentum, "SGD momentum")
      ->check(finite_range(0.0, 0.9999))
      ->capture_default_str();
  command->add_option("--weight-decay", config.weight_decay, "Weight decay")
      ->check(finite_range(0.0, 1.0))
      ->capture_default_str();
  add_choice_option(*command, "--schedule", config.schedule, "none | step | cosine");
  command->add_option("--step-size", config.step_size, "Step schedule: epochs per decay (0 = epochs/3)")
      ->check(non_negative_integer(1000000));
  command->add_option("--step-gamma", config.step_gamma, "Step schedule: decay factor")
      ->check(positive_number(1.0))
      ->capture_default_str();
  command
      ->add_option("--warmup-epochs", config.warmup_epochs,
                   "Linear learning-rate warmup over this many epochs (fractions allowed; 0 = none)")
      ->check(finite_range(0.0, 1000000.0))
      ->capture_default_str();
  command->add_option("--seed", config.seed, "Seed for initialisation, shuffling and augmentation")
      ->check(seed_value())
      ->capture_default_str();
  command->add_option("--threads", config.threads, "Cores to use (0 = all)")
      ->check(non_negative_integer(4096))
      ->capture_default_str();
  add_choice_option(*command, "--thread-plan", config.thread_plan,
                    "tuned (per precision and model) | python (Python torch's default)");
  add_choice_option(*command, "--allocator", config.allocator,
                    "tuned (reuse large freed blocks: no page faults per batch) | system (glibc defaults)");
  command->add_option("--limit", config.limit, "Use only the first N training samples (0 = all)")
      ->check(non_negative_integer(kMaxSamples));
  command->add_option("--test-limit", config.test_limit, "Use only the first N test samples (0 = all)")
      ->check(non_negative_integer(kMaxSamples));
  command->add_flag("--augment", config.augment, "Random crop (pad 4) + horizontal flip");
  command
      ->add_option("--prefetch", config.prefetch_batches,
                   "Batches prepared ahead on a background thread (0 = off)")
      ->check(non_negative_integer(64))
      ->capture_default_str();
  command->add_option("--eval-batch", config.eval_batch_size, "Evaluation batch size")
      ->check(positive_integer(kMaxBatch))
      ->capture_default_str();
  add_choice_option(*command, "--precision", config.precision,
                    "fp32 | bf16 | fp16 | auto (fastest precision native here: bf16 with AVX512_BF16/AMX)");
  command->add_option("--device", device, "cpu | cuda | cuda:N (CUDA needs an IPJ_WITH_CUDA build)")
      ->capture_default_str();
  add_choice_option(*command, "--loss-scale", config.loss_scale,
                    "none | dynamic | auto (dynamic GradScaler for fp16)");
  command
      ->add_option("--accum", config.accumulation_steps,
                   "Gradient accumulation: micro-batches per optimizer step")
      ->check(positive_integer(4096))
      ->capture_default_str();
  add_choice_option(*command, "--optimizer-impl", config.optimizer_impl,
                    "fused (SGD: one-pass momentum, gradients set to none) | torch (torch::optim as is)");
  add_choice_option(*command, "--memory-format", config.memory_format,
                    "contiguous | channels_last (NHWC weights and batches: faster convolutions and pooling)");
  add_choice_option(
      *command, "--compile", config.compile,
      "none | jit (evaluate through frozen TorchScript: mlp, cnn) | graphs (CUDA graphs, GPU builds)");
  command
      ->add_option("--target-acc", config.target_acc,
                   "Stop once test accuracy reaches this fraction (0 = off)")
      ->check(probability());
  command->add_flag(
      "--no-energy", [](std::int64_t) { config.measure_energy = false; },
      "Do not measure energy (overhead comparisons); energy_source is \"none\"");
  command->add_option("--energy-interval-ms", config.energy_interval_ms, "Energy meter sampling period")
      ->check(positive_integer(10000))
      ->capture_default_str();
  command
      ->add_option("--cpu-tdp-w", config.cpu_tdp_w,
                   "CPU power at full load for the energy estimate (0 = default)")
      ->check(finite_range(0.0, 100000.0));
  command->add_option("--out", config.out_dir,
                      "Run folder for checkpoint.pt and results.json (default runs/MODEL-TIME)");
  command->add_flag("--no-save", no_save, "Write no checkpoint or results file");
  command->add_option("--repeat", repeat, "Run K seeds (seed, seed+1, ...) and report median and range")
      ->check(positive_integer(100));
  command->add_flag("--resume", config.resume, "Continue the run in --out from its last checkpoint");
  add_distributed_flags(*command, distributed);
  static std::string recipe_path;
  command->add_option("--recipe", recipe_path,
                      "Recipe file (ipj tune's recipe.json): its settings replace the defaults; flags given "
                      "here override the recipe");

  command->callback([&runner, command] {
    runner = [command] {
      if (no_save && (config.resume || !config.out_dir.empty()))
        throw ipj::Error(ipj::ErrorCategory::usage, "--no-save cannot be combined with --out or --resume");
      config.model = parse_model_flags(model, input_shape);
      if (!recipe_path.empty()) {
        const Json recipe = train::read_recipe_file(recipe_path);
        config = train::apply_recipe(config, recipe, given_config_keys(*command));
        check_model_against_recipe(*command, recipe, recipe_path, config.model);
      }
      if (!no_save && config.out_dir.empty())
        config.out_dir = default_run_folder(models::short_name(config.model));
      config.data_options = data_options(data_flags);
      config.device = train::parse_device(device, "--device");
      std::optional<dist::DistributedEnvironment> job;  // set with --distributed
      if (distributed.enabled) {
        if (repeat > 1)
          throw ipj::Error(ipj::ErrorCategory::usage, "--repeat cannot be combined with --distributed");
        job = dist::read_distributed_environment();
        config = dist::data_parallel_config(config, *job);
      }
      const bool primary = !job || job->is_primary();  // prints and writes; the other ranks stay quiet
      train::validate(config);
      if (primary) require_writable_folder(config.out_dir, "--out");  // before any work, not after an epoch
      if (config.compile == train::CompileMode::jit) infer::require_compilable(config.model.zoo_name);
      train::resolve_precision_here(config.precision,
                                    config.device);  // fail before loading data (e.g. fp16 on a CPU)
      const data::Dataset dataset =
          data::load_dataset(config.data_dir, config.limit, config.test_limit, config.data_options);
      if (!flags.quiet && primary) std::cerr << "data: " << data::describe(dataset) << "\n";

      train::TrainHooks hooks;
      hooks.show_progress = !flags.quiet && primary;
      hooks.environment = device::device_report();
      if (config.compile == train::CompileMode::jit) {
        hooks.evaluate = [](models::Classifier& model, const data::Dataset& data, std::int64_t batch) {
          return infer::evaluate_compiled(model, config.model.zoo_name, data, batch);
        };
      }
      hooks.on_epoch_end = [primary](const train::EpochMetrics& metrics) {
        if (flags.json || !primary) return;
        std::printf("epoch %d  loss %.4f  train acc %.4f  test acc %.4f  %s samples/s  %s  %.1f J (%s)\n",
                    metrics.epoch, metrics.loss, metrics.train_acc, metrics.test_acc,
                    format_count(metrics.samples_per_s).c_str(), format_duration(metrics.wall_s).c_str(),
                    metrics.energy_j, metrics.energy_source.c_str());
        std::fflush(stdout);
      };
      if (repeat > 1) {
        const Json report = train::run_repeated(config, repeat, dataset, hooks);
        if (flags.json) {
          print_json(report);
        } else {
          const Json& summary = report["summary"];
          auto show = [](const Json& spread, const char* unit) {
            if (spread.is_null()) return std::string("none reached");
            char text[96];
            std::snprintf(text, sizeof text, "median %.4g%s (range %.4g-%.4g)",
                          spread["median"].get<double>(), unit, spread["min"].get<double>(),
                          spread["max"].get<double>());
            return std::string(text);
          };
          std::printf("%d runs: test acc %s; time to target %s; energy to target %s; missed the target: %d\n",
                      repeat, show(summary["test_acc"], "").c_str(),
                      show(summary["time_to_target_s"], " s").c_str(),
                      show(summary["energy_to_target_j"], " J").c_str(), summary["missed_target"].get<int>());
        }
        return 0;
      }
      const train::TrainResult result =
          job ? dist::run_data_parallel_training(
                    config, dataset, hooks, *job,
                    {dist::parse_backend(distributed.backend, config.device.cuda),
                     std::chrono::milliseconds(static_cast<std::int64_t>(distributed.timeout_s * 1000.0))})
              : train::run_training(config, dataset, hooks);
      if (!primary) return 0;
      if (flags.json) {
        print_json(result.report);
      } else {
        std::printf(
            "final: test acc %.4f  %.0f samples/s  wall %s (training %s)  energy %.1f J (%s), %.3g "
            "J/sample\n",
            result.test_acc, result.samples_per_s, format_duration(result.wall_s).c_str(),
            format_duration(result.train_wall_s).c_str(), result.energy_j, result.energy_source.c_str(),
            result.samples > 0 ? result.energy_j / result.samples : 0.0);
        if (!config.out_dir.empty()) std::printf("results: %s/results.json\n", config.out_dir.c_str());
        if (!config.out_dir.empty() && config.model.is_file())
          std::printf(
              "trained TorchScript: %s/model.pt (takes images normalised with the data set's mean/std)\n",
              config.out_dir.c_str());
      }
      return 0;
    };
  });
  return command;
}

}  // namespace ipj::cli
