// The fp32 training loop. Hot path: no per-step host syncs except the throttled progress read-out.
#include "ipj/train/trainer.hpp"

#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <filesystem>

#include "cuda_graph_step.hpp"
#include "ipj/core/error.hpp"
#include "ipj/core/log.hpp"
#include "ipj/core/progress.hpp"
#include "ipj/data/batch_loader.hpp"
#include "ipj/device/allocator.hpp"
#include "ipj/device/threading.hpp"
#include "ipj/energy/energy_monitor.hpp"
#include "ipj/energy/energy_report.hpp"
#include "ipj/models/flop_counter.hpp"
#include "ipj/models/registry.hpp"
#include "ipj/train/capturable_sgd.hpp"
#include "ipj/train/checkpoint.hpp"
#include "ipj/train/evaluate.hpp"
#include "ipj/train/grad_scaler.hpp"
#include "ipj/train/lr_schedule.hpp"
#include "ipj/train/model_setup.hpp"
#include "ipj/train/precision.hpp"

namespace ipj::train {
namespace {

bool jit_evaluation_supported(const TrainConfig& config) {
  return config.device == "cpu";
}

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const TrainConfig& config,
                                                        models::Classifier& model) {
  if (config.optimizer == "adamw") {
    return std::make_unique<torch::optim::AdamW>(
        model.parameters(),
        torch::optim::AdamWOptions(config.learning_rate).weight_decay(config.weight_decay));
  }
  return std::make_unique<torch::optim::SGD>(model.parameters(),
                                             torch::optim::SGDOptions(config.learning_rate)
                                                 .momentum(config.momentum)
                                                 .weight_decay(config.weight_decay));
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double learning_rate) {
  for (auto& group : optimizer.param_groups())
    group.options().set_lr(learning_rate);
}

[[noreturn]] void fail_diverged(int epoch, std::int64_t step, const TrainConfig& config) {
  fail(ErrorCategory::runtime, "training diverged: the loss became NaN/Inf at epoch " +
                                   std::to_string(epoch) + ", step " + std::to_string(step) + " (precision " +
                                   config.precision + "). Likely causes: learning rate too high (--lr " +
                                   std::to_string(config.learning_rate) +
                                   "; try 10x lower), an fp16 range problem (use --loss-scale dynamic, or "
                                   "bf16), numerically unstable ops "
                                   "(large logits, log of 0), or unnormalised / corrupt input data");
}

Json model_description(const TrainConfig& config, models::Classifier& model, const models::InputShape& shape,
                       const torch::Device& device) {
  torch::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  const std::int64_t flops = models::count_flops([&] {
    model.forward(torch::zeros({1, shape.channels, shape.height, shape.width}, torch::TensorOptions(device)));
  });
  if (was_training) model.train();
  return Json{{"name", config.model.label()},
              {"source", config.model.is_file() ? "torchscript" : "zoo"},
              {"parameters", models::count_parameters(model)},
              {"forward_flops_per_sample", flops},
              {"input_shape", {shape.channels, shape.height, shape.width}}};
}

TrainResult run_training_loop(const TrainConfig& config, const data::Dataset& dataset,
                              const TrainHooks& hooks);

}  // namespace

TrainResult run_training(const TrainConfig& config, const data::Dataset& dataset, const TrainHooks& hooks) {
  if (!config.model.is_file()) return run_training_loop(config, dataset, hooks);
  try {  // a user's module can reach LibTorch operators that fail (e.g. no bf16 kernel): say so, no exit 70
    return run_training_loop(config, dataset, hooks);
  } catch (const c10::Error& error) {
    fail_user_model_step(config, error);
  }
}

Json to_json(const EpochMetrics& metrics) {
  return Json{{"epoch", metrics.epoch},
              {"loss", metrics.loss},
              {"train_acc", metrics.train_acc},
              {"test_acc", metrics.test_acc},
              {"test_loss", metrics.test_loss},
              {"lr", metrics.learning_rate},
              {"samples", metrics.samples},
              {"train_wall_s", metrics.train_wall_s},
              {"eval_wall_s", metrics.eval_wall_s},
              {"wall_s", metrics.wall_s},
              {"samples_per_s", metrics.samples_per_s},
              {"energy_j", metrics.energy_j},
              {"energy_source", metrics.energy_source}};
}

EpochMetrics epoch_metrics_from_json(const Json& json) {
  EpochMetrics metrics;
  metrics.epoch = json.value("epoch", 0);
  metrics.loss = json.value("loss", 0.0);
  metrics.train_acc = json.value("train_acc", 0.0);
  metrics.test_acc = json.value("test_acc", 0.0);
  metrics.test_loss = json.value("test_loss", 0.0);
  metrics.learning_rate = json.value("lr", 0.0);
  metrics.samples = json.value("samples", std::int64_t{0});
  metrics.train_wall_s = json.value("train_wall_s", 0.0);
  metrics.eval_wall_s = json.value("eval_wall_s", 0.0);
  metrics.wall_s = json.value("wall_s", 0.0);
  metrics.samples_per_s = json.value("samples_per_s", 0.0);
  metrics.energy_j = json.value("energy_j", 0.0);
  metrics.energy_source = json.value("energy_source", std::string());
  return metrics;
}

namespace {

TrainResult run_training_loop(const TrainConfig& config, const data::Dataset& dataset,
                              const TrainHooks& hooks) {
  validate(config);
  const auto run_start = Clock::now();
  const PrecisionChoice precision = resolve_precision_here(config.precision, config.device);
  const torch::Device device(config.device);
  const bool on_cuda = device.is_cuda();
  const bool use_scaler =
      config.loss_scale == "dynamic" || (config.loss_scale == "auto" && precision.precision == "fp16");
  const device::ThreadPlan thread_plan =
      config.tune_threads
          ? device::plan_threads(precision.precision, config.threads, models::is_convolutional(config.model))
          : device::python_default_thread_plan(config.threads);
  device::apply_thread_plan(thread_plan);
  const device::AllocatorPlan allocator_plan =
      config.allocator == "tuned" ? device::tune_allocator() : device::system_allocator();

  if (config.compile == "jit" && !hooks.compiled_evaluate)
    fail(ErrorCategory::internal, "--compile jit needs TrainHooks::compiled_evaluate");
  if (config.compile == "jit" && !jit_evaluation_supported(config))
    fail(ErrorCategory::unsupported, "--compile jit evaluates on the CPU; use it with --device cpu");
  torch::manual_seed(config.seed);
  const models::InputShape shape = image_shape(dataset);
  const Json model_info = describe_model_source(config.model, dataset);  // what checkpoints record
  TrainResult result;
  result.model = models::build_classifier(config.model, shape, dataset.num_classes);
  result.model->to(device);
  models::Classifier& model = *result.model;
  auto optimizer = make_optimizer(config, model);
  GradScaler scaler;
  if (config.compile == "graphs" && use_scaler)
    fail(ErrorCategory::unsupported,
         "--compile graphs records the step without loss scaling; use --precision bf16 or fp32, or "
         "--compile none for fp16 with --loss-scale dynamic");

  const std::string checkpoint_path =
      config.out_dir.empty() ? "" : (std::filesystem::path(config.out_dir) / kCheckpointFileName).string();
  int start_epoch = 0;
  if (config.resume) {
    if (!std::filesystem::exists(checkpoint_path))
      fail(ErrorCategory::usage,
           "--resume: no checkpoint at '" + checkpoint_path + "'; train without --resume first");
    const CheckpointState state = resume_checkpoint(checkpoint_path, config.model, model, *optimizer, device);
    if (use_scaler && state.loss_scale > 0.0) scaler.set_state(state.loss_scale, state.scaler_growth_tracker);
    check_resumable(config_from_json(state.config), config);
    start_epoch = state.completed_epochs;
    for (const auto& epoch_json : state.epoch_metrics)
      result.epochs.push_back(epoch_metrics_from_json(epoch_json));
    result.resumed_from_epoch = start_epoch;
    if (start_epoch >= config.epochs) {
      spdlog::info("checkpoint already has {} epoch(s), nothing to do (raise --epochs to continue)",
                   start_epoch);
    }
  }

  // --memory-format channels_last: 4-D weights re-laid out in place (set_data keeps the optimizer's
  // references and state keys); after a resume, so that loaded weights get the layout too. Copied into
  // NHWC-strided storage rather than .contiguous(ChannelsLast): for one input channel ([32, 1, 3, 3]) that
  // returns the NCHW tensor unchanged (both layouts count as contiguous), oneDNN then picks NCHW for the
  // first convolution and what follows it (BatchNorm, ReLU, a max-pool 10x slower in NCHW here) stays NCHW.
  const bool channels_last = config.memory_format == "channels_last";
  if (channels_last) {
    torch::NoGradGuard no_grad;
    for (auto& parameter : model.parameters()) {
      if (parameter.dim() != 4) continue;
      torch::Tensor nhwc = torch::empty(parameter.sizes(),
                                        parameter.options().memory_format(torch::MemoryFormat::ChannelsLast));
      nhwc.copy_(parameter);
      parameter.set_data(nhwc);
    }
  }

  // The SGD update through CapturableSgd (--optimizer-impl fused, and always for --compile graphs): one pass
  // for the momentum, gradients set to none instead of zeroed (backward then moves its result in rather than
  // adding to zeros). Created after a resume has loaded the optimizer's momentum, and after the layout
  // change, so that it shares those buffers in the parameters' layout. Loss scaling steps through torch's
  // optimizer.
  std::unique_ptr<CapturableSgd> sgd_step;
  if (config.optimizer == "sgd" &&
      (config.compile == "graphs" || (config.optimizer_impl == "fused" && !use_scaler)))
    sgd_step = std::make_unique<CapturableSgd>(static_cast<torch::optim::SGD&>(*optimizer));
#ifdef IPJ_WITH_CUDA
  std::unique_ptr<CudaGraphTrainingStep> graph_step;  // --compile graphs: recorded on the first batch
#endif
  std::int64_t dropped_batches = 0;  // short last batches that a recorded graph cannot take

  const std::int64_t batches_per_epoch = (dataset.train.count + config.batch_size - 1) / config.batch_size;
  const std::int64_t accumulation = config.accumulation_steps;
  const std::int64_t steps_per_epoch =
      (batches_per_epoch + accumulation - 1) / accumulation;  // optimizer steps
  ScheduleSpec schedule{config.schedule, config.learning_rate, config.epochs,
                        steps_per_epoch, config.step_size,     config.step_gamma};
  // Samples in the accumulation group holding batch `batch_index`: each micro-batch loss is weighted by its
  // share of the group, so that the update equals one large-batch step, including a short last group.
  auto group_samples = [&](std::int64_t batch_index) {
    const std::int64_t first_batch = batch_index / accumulation * accumulation;
    const std::int64_t end_batch = std::min(first_batch + accumulation, batches_per_epoch);
    return std::min(end_batch * config.batch_size, dataset.train.count) - first_batch * config.batch_size;
  };

  Json report;
  report["schema_version"] = kResultsSchemaVersion;
  report["kind"] = "train";
  report["config"] = to_json(config);
  report["precision"] = {{"requested", config.precision},
                         {"used", precision.precision},
                         {"reason", precision.reason},
                         {"loss_scaling", use_scaler ? "dynamic" : "none"}};
  report["environment"] = hooks.environment;
  report["threads"] = {{"torch", thread_plan.torch_threads},
                       {"blas", thread_plan.blas_threads},
                       {"reason", thread_plan.reason}};
  report["allocator"] = {
      {"plan", config.allocator}, {"applied", allocator_plan.applied}, {"reason", allocator_plan.reason}};
  report["dataset"] = {{"name", dataset.name},
                       {"format", dataset.format},
                       {"directory", dataset.directory},
                       {"train_samples", dataset.train.count},
                       {"test_samples", dataset.test.count},
                       {"mean", dataset.normalization.mean},
                       {"std", dataset.normalization.std}};
  report["model"] = model_description(config, model, shape, device);

  energy::MeterOptions meter_options;
  meter_options.cpu_tdp_w = config.cpu_tdp_w;
  energy::EnergyMonitor monitor(
      config.measure_energy ? energy::discover_meters(meter_options) : energy::MeterSet{},
      energy::MonitorOptions{config.energy_interval_ms,
                             on_cuda ? std::function<void()>([] { torch::cuda::synchronize(); }) : nullptr});
  auto source_of = [&](const energy::Measurement& measurement) -> std::string {
    return config.measure_energy ? energy::source_name(measurement.source) : "none";
  };
  monitor.begin_window("run");

  for (int epoch = start_epoch; epoch < config.epochs; ++epoch) {
    const std::string epoch_window = "epoch-" + std::to_string(epoch + 1);
    monitor.begin_window(epoch_window);
    model.train();
    data::LoaderOptions loader_options;
    loader_options.batch_size = config.batch_size;
    loader_options.seed = config.seed;
    loader_options.epoch = static_cast<std::uint64_t>(epoch);
    loader_options.augment = config.augment;
    loader_options.prefetch_batches = config.prefetch_batches;
    data::BatchLoader loader(dataset.train, dataset.normalization, loader_options);

    ProgressBar progress("epoch " + std::to_string(epoch + 1) + "/" + std::to_string(config.epochs),
                         loader.batch_count(), hooks.show_progress);
    torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions(torch::kFloat64).device(device));
    torch::Tensor correct = torch::zeros({}, torch::TensorOptions(torch::kInt64).device(device));
    std::int64_t samples = 0;
    double learning_rate = config.learning_rate;
    const auto epoch_start = Clock::now();
    while (auto batch = loader.next()) {
      const std::int64_t position_in_group = batch->index % accumulation;
      const bool last_in_group =
          position_in_group == accumulation - 1 || batch->index + 1 == batches_per_epoch;
      torch::Tensor images = batch->images.to(device, /*non_blocking=*/true);  // [B, C, H, W]
      if (channels_last) images = images.contiguous(torch::MemoryFormat::ChannelsLast);
      const torch::Tensor labels = batch->labels.to(device, /*non_blocking=*/true);  // [B]
      torch::Tensor logits;                                                          // [B, classes]
      torch::Tensor loss;                                                            // []
#ifdef IPJ_WITH_CUDA
      if (config.compile == "graphs") {
        if (batch->labels.size(0) != config.batch_size) {  // a recorded graph replays one shape only
          ++dropped_batches;
          continue;
        }
        learning_rate = learning_rate_at(schedule, epoch, batch->index);
        if (config.schedule != "none") sgd_step->set_learning_rate(learning_rate);
        if (!graph_step)
          graph_step =
              std::make_unique<CudaGraphTrainingStep>(model, *sgd_step, precision.precision, images, labels);
        graph_step->run(images, labels);
        logits = graph_step->logits();
        loss = graph_step->loss();
      }
#endif
      if (!loss.defined()) {
        if (position_in_group == 0) {
          learning_rate = learning_rate_at(schedule, epoch, batch->index / accumulation);
          if (config.schedule != "none") {
            if (sgd_step) {
              sgd_step->set_learning_rate(learning_rate);  // the device tensor and the optimizer's options
            } else {
              set_learning_rate(*optimizer, learning_rate);
            }
          }
          if (sgd_step) {
            sgd_step->clear_gradients();
          } else {
            optimizer->zero_grad();
          }
        }
        {
          AutocastRegion autocast(precision.precision, on_cuda);
          logits = model.forward(images);
        }
        loss = torch::nn::functional::cross_entropy(logits.to(torch::kFloat32), labels);
        const double group_share = static_cast<double>(batch->labels.size(0)) / group_samples(batch->index);
        const torch::Tensor weighted_loss = accumulation == 1 ? loss : loss * group_share;
        (use_scaler ? scaler.scale(weighted_loss) : weighted_loss).backward();
        if (last_in_group) {
          if (use_scaler) {
            scaler.step(*optimizer);
            scaler.update();
          } else if (sgd_step) {
            sgd_step->step();
          } else {
            optimizer->step();
          }
        }
      }

      const std::int64_t batch_size = batch->labels.size(0);
      samples += batch_size;
      loss_sum += loss.detach().to(torch::kFloat64) * static_cast<double>(batch_size);
      correct += logits.detach().argmax(1).eq(labels).sum();
      if (batch->index % 50 == 0 || batch->index + 1 == loader.batch_count()) {
        const double running_loss = loss_sum.item<double>() / static_cast<double>(samples);
        if (!std::isfinite(running_loss)) fail_diverged(epoch + 1, batch->index, config);
        progress.update(batch->index + 1,
                        "loss " + std::to_string(running_loss).substr(0, 6) + " " +
                            format_count(samples / std::max(1e-9, seconds_since(epoch_start))) +
                            " samples/s");
      }
    }
    EpochMetrics metrics;
    metrics.epoch = epoch + 1;
    metrics.train_wall_s = seconds_since(epoch_start);
    metrics.samples = samples;
    metrics.loss = samples > 0 ? loss_sum.item<double>() / static_cast<double>(samples) : 0.0;
    if (!std::isfinite(metrics.loss)) fail_diverged(epoch + 1, loader.batch_count(), config);
    metrics.train_acc = samples > 0 ? static_cast<double>(correct.item<std::int64_t>()) / samples : 0.0;
    metrics.samples_per_s = samples / std::max(1e-9, metrics.train_wall_s);
    metrics.learning_rate = learning_rate;
    const EvalResult test = config.compile == "jit"
                                ? hooks.compiled_evaluate(model, dataset, config.eval_batch_size)
                                : evaluate(model, dataset.test, dataset.normalization, config.eval_batch_size,
                                           precision.precision, config.device);
    metrics.test_acc = test.accuracy;
    metrics.test_loss = test.loss;
    metrics.eval_wall_s = test.wall_s;
    metrics.wall_s = metrics.train_wall_s + metrics.eval_wall_s;
    const energy::Measurement epoch_energy = monitor.end_window(epoch_window);
    metrics.energy_j = epoch_energy.energy_j;
    metrics.energy_source = source_of(epoch_energy);
    progress.finish("loss " + std::to_string(metrics.loss).substr(0, 6) + " test acc " +
                    std::to_string(metrics.test_acc).substr(0, 6));
    result.epochs.push_back(metrics);
    result.samples += samples;
    result.train_wall_s += metrics.train_wall_s;

    if (!config.out_dir.empty()) {
      CheckpointState state;
      state.completed_epochs = epoch + 1;
      state.config = to_json(config);
      state.model_info = model_info;
      state.generator_state = cpu_generator_state();
      state.epoch_metrics = Json::array();
      if (use_scaler) {
        state.loss_scale = scaler.current_scale();
        state.scaler_growth_tracker = scaler.growth_tracker();
      }
      for (const auto& done : result.epochs)
        state.epoch_metrics.push_back(to_json(done));
      save_checkpoint(checkpoint_path, model, *optimizer, state);
      write_trained_torchscript(config.out_dir, model, model_info);  // user models: OUT/model.pt
      // Results so far, so that an interrupted run still leaves a readable results.json ("complete": false).
      Json partial = report;
      partial["complete"] = false;
      partial["epochs"] = state.epoch_metrics;
      write_json_file((std::filesystem::path(config.out_dir) / "results.json").string(), partial);
    }
    if (hooks.on_epoch_end) hooks.on_epoch_end(metrics);
    if (config.target_acc > 0.0 && metrics.test_acc >= config.target_acc) break;  // --target-acc reached
  }

  const energy::Measurement run_energy = monitor.end_window("run");
  result.energy_j = run_energy.energy_j;
  result.energy_source = source_of(run_energy);
  if (!result.epochs.empty()) result.test_acc = result.epochs.back().test_acc;
  result.wall_s = seconds_since(run_start);
  result.samples_per_s = result.train_wall_s > 0 ? result.samples / result.train_wall_s : 0.0;

  // Time and energy to the target: cumulative train + eval wall time and energy up to the first epoch that
  // reached it (over every recorded epoch, including restored ones).
  Json time_to_target = nullptr, energy_to_target = nullptr;
  Json epochs = Json::array();
  double cumulative_s = 0.0, cumulative_j = 0.0;
  for (const auto& metrics : result.epochs) {
    epochs.push_back(to_json(metrics));
    cumulative_s += metrics.wall_s;
    cumulative_j += metrics.energy_j;
    if (config.target_acc > 0.0 && time_to_target.is_null() && metrics.test_acc >= config.target_acc) {
      time_to_target = cumulative_s;
      energy_to_target = config.measure_energy ? Json(cumulative_j) : Json(nullptr);
    }
  }
  report["complete"] = true;
  report["epochs"] = epochs;
  report["final"] = {{"test_acc", result.test_acc},
                     {"samples_per_s", result.samples_per_s},
                     {"wall_s", result.wall_s},
                     {"train_wall_s", result.train_wall_s},
                     {"samples", result.samples},
                     {"epochs_completed", static_cast<int>(result.epochs.size())},
                     {"resumed_from_epoch", result.resumed_from_epoch},
                     {"loss", result.epochs.empty() ? 0.0 : result.epochs.back().loss},
                     {"energy_j", result.energy_j},
                     {"energy_source", result.energy_source},
                     {"j_per_sample", result.samples > 0 ? result.energy_j / result.samples : 0.0},
                     {"acc_per_kj", energy::accuracy_per_kj(result.test_acc, result.energy_j)},
                     {"precision", precision.precision},
                     {"target_acc", config.target_acc > 0.0 ? Json(config.target_acc) : Json(nullptr)},
                     {"time_to_target_s", time_to_target},
                     {"energy_to_target_j", energy_to_target},
                     {"skipped_steps", scaler.skipped_steps()},
                     {"dropped_batches", dropped_batches},
                     {"loss_scale", use_scaler ? Json(scaler.current_scale()) : Json(nullptr)}};
  Json energy_json = energy::to_json(run_energy);
  Json meters = Json::array();
  for (const auto& status : monitor.meter_status())
    meters.push_back({{"name", status.name}, {"available", status.available}, {"reason", status.reason}});
  energy_json["meters"] = meters;
  report["energy"] = energy_json;
  if (!config.out_dir.empty())
    write_json_file((std::filesystem::path(config.out_dir) / "results.json").string(), report);
  result.report = std::move(report);
  return result;
}

}  // namespace

}  // namespace ipj::train
