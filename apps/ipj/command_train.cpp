// `ipj train`: trains a registry model on an image data set and writes results (see docs/CLI.md).
#include <iostream>

#include "cli_support.hpp"
#include "ipj/core/atomic_file.hpp"
#include "ipj/core/progress.hpp"
#include "ipj/data/dataset.hpp"
#include "ipj/device/device_report.hpp"
#include "ipj/infer/compiled_evaluation.hpp"
#include "ipj/train/precision.hpp"
#include "ipj/train/repeat.hpp"
#include "ipj/train/trainer.hpp"

namespace ipj::cli {
CLI::App* register_train_command(CLI::App& app, CommandRunner& runner) {
  auto* command = app.add_subcommand(
      "train",
      "Train a model on Fashion-MNIST (default) or any MNIST-format / CIFAR-10 folder\n"
      "Example: ipj train --model cnn --epochs 2 --batch 128 --lr 0.01 --out runs/cnn --json");
  static CommonOutputFlags flags;
  static train::TrainConfig config;
  static bool no_save = false;
  static std::string thread_plan = "tuned";
  static int repeat = 1;
  static std::string model = "mlp", input_shape;
  add_output_flags(*command, flags);
  command
      ->add_option("--model", model,
                   "mlp | cnn | resnet18 | resnet50, or a TorchScript file (torch.jit.script/trace .save); "
                   "a file's trained weights go to OUT/model.pt")
      ->capture_default_str();
  command->add_option("--input-shape", input_shape, kInputShapeHelp);
  command->add_option("--data", config.data_dir, "Data folder (IDX .gz/plain or CIFAR-10 binary)")
      ->capture_default_str();
  command->add_option("--epochs", config.epochs, "Training epochs")->capture_default_str();
  command->add_option("--batch", config.batch_size, "Mini-batch size")->capture_default_str();
  command->add_option("--lr", config.learning_rate, "Learning rate")
      ->check(finite_range(0.0, 100.0))
      ->capture_default_str();
  command->add_option("--optimizer", config.optimizer, "sgd | adamw")->capture_default_str();
  command->add_option("--momentum", config.momentum, "SGD momentum")
      ->check(finite_range(0.0, 1.0))
      ->capture_default_str();
  command->add_option("--weight-decay", config.weight_decay, "Weight decay")
      ->check(finite_range(0.0, 1.0))
      ->capture_default_str();
  command->add_option("--schedule", config.schedule, "none | step | cosine")->capture_default_str();
  command->add_option("--step-size", config.step_size, "Step schedule: epochs per decay (0 = epochs/3)");
  command->add_option("--step-gamma", config.step_gamma, "Step schedule: decay factor")
      ->check(finite_range(0.0, 1.0))
      ->capture_default_str();
  command->add_option("--seed", config.seed, "Seed for initialisation, shuffling and augmentation")
      ->capture_default_str();
  command->add_option("--threads", config.threads, "Cores to use (0 = all)")->capture_default_str();
  command
      ->add_option("--thread-plan", thread_plan,
                   "tuned (per precision and model) | python (Python torch's default)")
      ->check(CLI::IsMember({"tuned", "python"}))
      ->capture_default_str();
  command
      ->add_option("--allocator", config.allocator,
                   "tuned (reuse large freed blocks: no page faults per batch) | system (glibc defaults)")
      ->check(CLI::IsMember({"tuned", "system"}))
      ->capture_default_str();
  command->add_option("--limit", config.limit, "Use only the first N training samples (0 = all)");
  command->add_option("--test-limit", config.test_limit, "Use only the first N test samples (0 = all)");
  command->add_flag("--augment", config.augment, "Random crop (pad 4) + horizontal flip");
  command
      ->add_option("--prefetch", config.prefetch_batches,
                   "Batches prepared ahead on a background thread (0 = off)")
      ->capture_default_str();
  command->add_option("--eval-batch", config.eval_batch_size, "Evaluation batch size")->capture_default_str();
  command
      ->add_option("--precision", config.precision,
                   "fp32 | bf16 | fp16 | auto (fastest precision native here: bf16 with AVX512_BF16/AMX)")
      ->capture_default_str();
  command->add_option("--device", config.device, "cpu | cuda | cuda:N (CUDA needs an IPJ_WITH_CUDA build)")
      ->capture_default_str();
  command
      ->add_option("--loss-scale", config.loss_scale, "none | dynamic | auto (dynamic GradScaler for fp16)")
      ->capture_default_str();
  command
      ->add_option("--accum", config.accumulation_steps,
                   "Gradient accumulation: micro-batches per optimizer step")
      ->capture_default_str();
  command
      ->add_option("--optimizer-impl", config.optimizer_impl,
                   "fused (SGD: one-pass momentum, gradients set to none) | torch (torch::optim as is)")
      ->check(CLI::IsMember({"fused", "torch"}))
      ->capture_default_str();
  command
      ->add_option("--memory-format", config.memory_format,
                   "contiguous | channels_last (NHWC weights and batches: faster convolutions and pooling)")
      ->check(CLI::IsMember({"contiguous", "channels_last"}))
      ->capture_default_str();
  command
      ->add_option(
          "--compile", config.compile,
          "none | jit (evaluate through frozen TorchScript: mlp, cnn) | graphs (CUDA graphs, GPU builds)")
      ->capture_default_str();
  command
      ->add_option("--target-acc", config.target_acc,
                   "Stop once test accuracy reaches this fraction (0 = off)")
      ->check(finite_range(0.0, 1.0));
  command->add_flag(
      "--no-energy", [](std::int64_t) { config.measure_energy = false; },
      "Do not measure energy (overhead comparisons); energy_source is \"none\"");
  command->add_option("--energy-interval-ms", config.energy_interval_ms, "Energy meter sampling period")
      ->capture_default_str();
  command
      ->add_option("--cpu-tdp-w", config.cpu_tdp_w,
                   "CPU power at full load for the energy estimate (0 = default)")
      ->check(finite_range(0.0, 100000.0));
  command->add_option("--out", config.out_dir,
                      "Run folder for checkpoint.pt and results.json (default runs/MODEL-TIME)");
  command->add_flag("--no-save", no_save, "Write no checkpoint or results file");
  command->add_option("--repeat", repeat, "Run K seeds (seed, seed+1, ...) and report median and range")
      ->check(CLI::Range(1, 100));
  command->add_flag("--resume", config.resume, "Continue the run in --out from its last checkpoint");

  command->callback([&runner] {
    runner = [] {
      if (no_save && (config.resume || !config.out_dir.empty()))
        throw ipj::Error(ipj::ErrorCategory::usage, "--no-save cannot be combined with --out or --resume");
      config.model = parse_model_flags(model, input_shape);
      if (!no_save && config.out_dir.empty())
        config.out_dir = default_run_folder(models::short_name(config.model));
      config.tune_threads = thread_plan == "tuned";
      train::validate(config);
      require_writable_folder(config.out_dir, "--out");  // before any work, not after the first epoch
      if (config.compile == "jit") infer::require_compilable(config.model.zoo_name);
      train::resolve_precision_here(config.precision,
                                    config.device);  // fail before loading data (e.g. fp16 on a CPU)
      const data::Dataset dataset = data::load_dataset(config.data_dir, config.limit, config.test_limit);
      if (!flags.quiet) std::cerr << "data: " << data::describe(dataset) << "\n";

      train::TrainHooks hooks;
      hooks.show_progress = !flags.quiet;
      hooks.environment = device::device_report();
      if (config.compile == "jit") {
        hooks.compiled_evaluate = [](models::Classifier& model, const data::Dataset& data,
                                     std::int64_t batch) {
          return infer::evaluate_compiled(model, config.model.zoo_name, data, batch);
        };
      }
      hooks.on_epoch_end = [](const train::EpochMetrics& metrics) {
        if (flags.json) return;
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
      const train::TrainResult result = train::run_training(config, dataset, hooks);
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
