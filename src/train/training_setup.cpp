// Setting up a training run, and choosing its training step.
#include "training_setup.hpp"

#include <algorithm>
#include <filesystem>
#include <limits>

#include "cuda_graph_step.hpp"
#include "ipj/core/error.hpp"
#include "ipj/core/log.hpp"
#include "ipj/models/registry.hpp"
#include "ipj/models/script_classifier.hpp"
#include "ipj/train/checkpoint.hpp"
#include "ipj/train/linear_chain_step.hpp"
#include "ipj/train/model_setup.hpp"

namespace ipj::train {
namespace {

bool uses_loss_scaling(const TrainConfig& config, Precision precision) {
  return config.loss_scale == LossScaling::dynamic ||
         (config.loss_scale == LossScaling::automatic && precision == Precision::fp16);
}

device::ThreadPlan thread_plan_for(const TrainConfig& config, Precision precision,
                                   const device::MachineState& machine) {
  const device::ThreadWorkload workload =
      device::thread_workload(precision == Precision::fp32, models::is_convolutional(config.model));
  return device::plan_for_machine(config.thread_plan, workload, config.threads, machine);
}

// One training step's forward and backward and one evaluation forward of a throwaway copy of the model on two
// blank images, under autocast for `precision` (the run's own model, RNG and BatchNorm statistics stay
// untouched).
void probe_model(const TrainConfig& config, const models::InputShape& shape, std::int64_t classes,
                 Precision precision) {
  models::ClassifierPtr probe = models::build_classifier(config.model, shape, classes);
  probe->train();
  torch::Tensor logits;  // [2, classes]
  {
    AutocastRegion autocast(precision);
    logits = probe->forward(torch::zeros({2, shape.channels, shape.height, shape.width}));
  }
  logits.to(torch::kFloat32).sum().backward();
  // Evaluation takes other paths (e.g. nn.MultiheadAttention's fused kernel in eval mode without gradients).
  probe->eval();
  torch::NoGradGuard no_grad;
  AutocastRegion autocast(precision);
  probe->forward(torch::zeros({2, shape.channels, shape.height, shape.width}));
}

// The resolved precision, or fp32 with a warning when the model fails under CPU autocast (LibTorch 1.13 has
// no bf16 path for some ops, e.g. nn.MultiheadAttention's; a oneDNN capped below bf16 by ONEDNN_MAX_CPU_ISA
// refuses bf16 matmuls): found before training, not after it. Zoo models are probed too (a few ms).
PrecisionChoice precision_that_runs(const TrainConfig& config, const data::Dataset& dataset) {
  PrecisionChoice choice = resolve_precision_here(config.precision, config.device);
  if (choice.precision == Precision::fp32 || config.device.cuda) return choice;
  const models::InputShape shape = image_shape(dataset);
  try {
    probe_model(config, shape, dataset.num_classes, choice.precision);
    return choice;
  } catch (const std::exception& error) {
    try {
      probe_model(config, shape, dataset.num_classes, Precision::fp32);
    } catch (const std::exception&) {
      return choice;  // the model fails in fp32 too: the run reports that error
    }
    // fp32 ran: the input-shape hint that ScriptClassifier adds to a failing forward does not apply
    std::string what = error.what();
    what =
        what.substr(0, std::min({what.find('\n'), what.find("; check that it takes the data set's images")}));
    if (what.size() > 240) what = what.substr(0, what.rfind(' ', 240)) + " ...";
    const std::string name = choice_name(choice.precision);
    spdlog::warn("{} failed on model '{}' ({}); training it in fp32 instead", name, config.model.label(),
                 what);
    torch::manual_seed(config.seed);
    return PrecisionChoice{Precision::fp32, choice.reason + "; " + name +
                                                " failed on this model under autocast (" + what +
                                                "): fell back to fp32"};
  }
}

// The combinations of config and hooks that cannot run, before anything is built.
void check_combination(const TrainConfig& config, const TrainHooks& hooks, bool loss_scaling) {
  if (config.compile == CompileMode::jit && !hooks.evaluate)
    fail(ErrorCategory::internal, "--compile jit needs TrainHooks::evaluate (the compiled evaluation)");
  if (config.compile == CompileMode::jit && config.device.cuda)
    fail(ErrorCategory::unsupported, "--compile jit evaluates on the CPU; use it with --device cpu");
  if (config.compile == CompileMode::graphs && loss_scaling)
    fail(ErrorCategory::unsupported,
         "--compile graphs records the step without loss scaling; use --precision bf16 or fp32, or "
         "--compile none for fp16 with --loss-scale dynamic");
  if (config.compile == CompileMode::graphs &&
      (hooks.step.before_backward || hooks.step.before_optimizer_step))
    fail(ErrorCategory::unsupported,
         "--compile graphs records the whole training step, so nothing can run between its backward and "
         "update; use --compile none");
}

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const TrainConfig& config,
                                                        models::Classifier& model) {
  if (config.optimizer == OptimizerKind::adamw) {
    return std::make_unique<torch::optim::AdamW>(
        model.parameters(),
        torch::optim::AdamWOptions(config.learning_rate).weight_decay(config.weight_decay));
  }
  return std::make_unique<torch::optim::SGD>(model.parameters(),
                                             torch::optim::SGDOptions(config.learning_rate)
                                                 .momentum(config.momentum)
                                                 .weight_decay(config.weight_decay));
}

models::ClassifierPtr seeded_model(const TrainConfig& config, const models::InputShape& shape,
                                   std::int64_t classes, const torch::Device& device) {
  torch::manual_seed(config.seed);
  models::ClassifierPtr model = models::build_classifier(config.model, shape, classes);
  model->to(device);
  return model;
}

#ifdef IPJ_WITH_CUDA
// --compile graphs: the whole step recorded on the first full batch and replayed; short batches dropped.
class CudaGraphStep : public TrainingStep {
 public:
  CudaGraphStep(const TrainingSetup& setup, CapturableSgd& optimizer)
      : setup_(setup), optimizer_(optimizer) {}

  StepLoss run(const data::Batch& batch, const StepContext& context) override {
    if (batch.labels.size(0) != setup_.config.batch_size) return {};  // a graph replays one shape only
    if (context.learning_rate != learning_rate_) {
      optimizer_.set_learning_rate(context.learning_rate);  // a kernel on the rate tensor the graph reads
      learning_rate_ = context.learning_rate;
    }
    const TrainingSetup::DeviceBatch on_device = setup_.to_device(batch);
    if (!graph_)
      graph_ = std::make_unique<CudaGraphTrainingStep>(*setup_.model, optimizer_, setup_.precision.precision,
                                                       on_device.images, on_device.labels);
    graph_->run(on_device.images, on_device.labels);
    return {graph_->loss(), graph_->logits()};
  }
  const char* name() const override { return "cuda_graph"; }

 private:
  const TrainingSetup& setup_;
  CapturableSgd& optimizer_;
  std::unique_ptr<CudaGraphTrainingStep> graph_;
  double learning_rate_ = std::numeric_limits<double>::quiet_NaN();
};
#endif

}  // namespace

TrainingSetup::TrainingSetup(const TrainConfig& config, const data::Dataset& dataset, const TrainHooks& hooks)
    : config(config),
      precision(precision_that_runs(config, dataset)),
      device(device_name(config.device)),
      loss_scaling(uses_loss_scaling(config, precision.precision)),
      machine(device::read_machine_state()),
      process_settings(thread_plan_for(config, precision.precision, machine), config.allocator),
      quiet_plan(thread_plan_for(config, precision.precision, device::quiet_machine(machine))),
      shape(image_shape(dataset)),
      model_info(describe_model_source(config.model, dataset)) {
  check_combination(config, hooks, loss_scaling);
  model = seeded_model(config, shape, dataset.num_classes, device);
  optimizer = make_optimizer(config, *model);
  if (config.resume) resume();
  // After a resume, so that the loaded weights get the layout too.
  if (config.memory_format == MemoryFormat::channels_last) use_channels_last();
}

std::string TrainingSetup::checkpoint_path() const {
  return config.out_dir.empty() ? "" : (std::filesystem::path(config.out_dir) / kCheckpointFileName).string();
}

void TrainingSetup::resume() {
  const std::string path = checkpoint_path();
  if (!std::filesystem::exists(path))
    fail(ErrorCategory::usage, "--resume: no checkpoint at '" + path + "'; train without --resume first");
  const CheckpointState state = resume_checkpoint(path, config.model, *model, *optimizer, device);
  if (loss_scaling && state.loss_scale > 0.0) scaler.set_state(state.loss_scale, state.scaler_growth_tracker);
  check_resumable(config_from_json(state.config), config);
  start_epoch = state.completed_epochs;
  for (const auto& epoch_json : state.epoch_metrics)
    restored_epochs.push_back(epoch_metrics_from_json(epoch_json));
  if (start_epoch >= config.epochs)
    spdlog::info("checkpoint already has {} epoch(s), nothing to do (raise --epochs to continue)",
                 start_epoch);
}

// --memory-format channels_last: 4-D weights re-laid out in place (set_data keeps the optimizer's references
// and state keys). Copied into NHWC-strided storage rather than .contiguous(ChannelsLast): for one input
// channel ([32, 1, 3, 3]) that returns the NCHW tensor unchanged (both layouts count as contiguous), oneDNN
// then picks NCHW for the first convolution and what follows it (BatchNorm, ReLU, a max-pool 10x slower in
// NCHW here) stays NCHW.
void TrainingSetup::use_channels_last() {
  torch::NoGradGuard no_grad;
  for (auto& parameter : model->parameters()) {
    if (parameter.dim() != 4) continue;
    torch::Tensor nhwc =
        torch::empty(parameter.sizes(), parameter.options().memory_format(torch::MemoryFormat::ChannelsLast));
    nhwc.copy_(parameter);
    parameter.set_data(nhwc);
  }
}

TrainingSetup::DeviceBatch TrainingSetup::to_device(const data::Batch& batch) const {
  torch::Tensor images = batch.images.to(device, /*non_blocking=*/true);  // [B, C, H, W]
  if (config.memory_format == MemoryFormat::channels_last)
    images = images.contiguous(torch::MemoryFormat::ChannelsLast);
  return {images, batch.labels.to(device, /*non_blocking=*/true)};  // labels: [B]
}

StepLoss TrainingSetup::classification_loss(const data::Batch& batch) const {
  const DeviceBatch on_device = to_device(batch);
  torch::Tensor logits;  // [B, classes]
  {
    AutocastRegion autocast(precision.precision, device.is_cuda());
    logits = model->forward(on_device.images);
  }
  return {torch::nn::functional::cross_entropy(logits.to(torch::kFloat32), on_device.labels), logits};
}

namespace {

// What the linear-chain step leaves out (linear_chain_step.hpp): the other devices and precisions, gradient
// accumulation, processes training together and step hooks; the model itself is checked by its layers.
bool takes_linear_chain_step(const TrainingSetup& setup, const StepHooks& hooks) {
  const TrainConfig& config = setup.config;
  const Precision precision = setup.precision.precision;
  return config.optimizer_impl == OptimizerImpl::fused && !setup.device.is_cuda() &&
         config.compile != CompileMode::graphs && config.accum == 1 && config.world_size == 1 &&
         !hooks.before_backward && !hooks.before_optimizer_step &&
         (precision == Precision::fp32 || precision == Precision::bf16);
}

// The model's Linear chain: a zoo model's from its layer program, a TorchScript file's from its graph.
std::optional<std::vector<ChainLayer>> model_linear_chain(const TrainingSetup& setup) {
  if (!setup.config.model.is_file()) return linear_chain_layers(setup.config.model.zoo_name, *setup.model);
  const auto* script = dynamic_cast<const models::ScriptClassifier*>(setup.model.get());
  return script == nullptr ? std::nullopt : script_linear_chain_layers(*script);
}

}  // namespace

std::unique_ptr<TrainingStep> choose_training_step(TrainingSetup& setup, LossHook loss,
                                                   const StepHooks& hooks,
                                                   std::unique_ptr<CapturableSgd>& fused_sgd) {
  const TrainConfig& config = setup.config;
  const bool sgd = config.optimizer == OptimizerKind::sgd;
  if (config.compile == CompileMode::graphs ||
      (sgd && config.optimizer_impl != OptimizerImpl::torch && !setup.loss_scaling))
    fused_sgd = std::make_unique<CapturableSgd>(static_cast<torch::optim::SGD&>(*setup.optimizer));
#ifdef IPJ_WITH_CUDA
  if (config.compile == CompileMode::graphs) return std::make_unique<CudaGraphStep>(setup, *fused_sgd);
#endif
  if (setup.loss_scaling)
    return make_loss_scaling_step(*setup.optimizer, setup.scaler, std::move(loss), hooks);
  if (fused_sgd && takes_linear_chain_step(setup, hooks))
    if (auto layers = model_linear_chain(setup))
      return make_linear_chain_step(
          std::move(*layers), *fused_sgd,
          setup.precision.precision == Precision::bf16 ? ChainPrecision::bf16 : ChainPrecision::fp32);
  if (fused_sgd) return make_fused_sgd_step(*fused_sgd, std::move(loss), hooks);
  return make_torch_optimizer_step(*setup.optimizer, std::move(loss), hooks);
}

}  // namespace ipj::train
