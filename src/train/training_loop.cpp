// The epoch loop and the eager training-step strategies (torch optimizer, fused SGD, loss scaling).
#include "ipj/train/training_loop.hpp"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <limits>

#include "ipj/core/progress.hpp"
#include "ipj/train/capturable_sgd.hpp"
#include "ipj/train/grad_scaler.hpp"

namespace ipj::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// How gradients become weights: the part in which the eager strategies differ.
class GradientUpdate {
 public:
  virtual ~GradientUpdate() = default;
  virtual void set_learning_rate(double learning_rate) = 0;
  virtual void clear_gradients() = 0;
  virtual void backward(const torch::Tensor& loss) = 0;
  virtual void apply() = 0;
};

void set_optimizer_rate(torch::optim::Optimizer& optimizer, double learning_rate) {
  for (auto& group : optimizer.param_groups())
    group.options().set_lr(learning_rate);
}

class TorchOptimizerUpdate : public GradientUpdate {
 public:
  explicit TorchOptimizerUpdate(torch::optim::Optimizer& optimizer) : optimizer_(optimizer) {}
  void set_learning_rate(double learning_rate) override { set_optimizer_rate(optimizer_, learning_rate); }
  void clear_gradients() override { optimizer_.zero_grad(); }
  void backward(const torch::Tensor& loss) override { loss.backward(); }
  void apply() override { optimizer_.step(); }

 private:
  torch::optim::Optimizer& optimizer_;
};

class FusedSgdUpdate : public GradientUpdate {
 public:
  explicit FusedSgdUpdate(CapturableSgd& optimizer) : optimizer_(optimizer) {}
  // The device tensor and the optimizer's options (what checkpoints save).
  void set_learning_rate(double learning_rate) override { optimizer_.set_learning_rate(learning_rate); }
  void clear_gradients() override { optimizer_.clear_gradients(); }
  void backward(const torch::Tensor& loss) override { loss.backward(); }
  void apply() override { optimizer_.step(); }

 private:
  CapturableSgd& optimizer_;
};

class LossScalingUpdate : public GradientUpdate {
 public:
  LossScalingUpdate(torch::optim::Optimizer& optimizer, GradScaler& scaler)
      : optimizer_(optimizer), scaler_(scaler) {}
  void set_learning_rate(double learning_rate) override { set_optimizer_rate(optimizer_, learning_rate); }
  void clear_gradients() override { optimizer_.zero_grad(); }
  void backward(const torch::Tensor& loss) override { scaler_.scale(loss).backward(); }
  void apply() override {
    scaler_.step(optimizer_);  // skipped when a gradient is inf/NaN
    scaler_.update();
  }

 private:
  torch::optim::Optimizer& optimizer_;
  GradScaler& scaler_;
};

// The eager step: every strategy but the CUDA graph.
class EagerTrainingStep : public TrainingStep {
 public:
  EagerTrainingStep(std::unique_ptr<GradientUpdate> update, LossHook loss, StepHooks hooks, const char* name)
      : update_(std::move(update)), loss_(std::move(loss)), hooks_(std::move(hooks)), name_(name) {}

  StepLoss run(const data::Batch& batch, const StepContext& context) override {
    if (context.starts_group) {
      if (context.learning_rate !=
          learning_rate_) {  // the schedule moved (a kernel per change, not per step)
        update_->set_learning_rate(context.learning_rate);
        learning_rate_ = context.learning_rate;
      }
      update_->clear_gradients();
    }
    StepLoss step = loss_(batch, context);  // the forward pass and the loss
    if (context.applies_update && hooks_.before_backward) hooks_.before_backward(context);
    update_->backward(context.loss_share == 1.0 ? step.loss : step.loss * context.loss_share);
    if (context.applies_update) {
      if (hooks_.before_optimizer_step) hooks_.before_optimizer_step(context);
      update_->apply();
    }
    return step;
  }
  const char* name() const override { return name_; }

 private:
  std::unique_ptr<GradientUpdate> update_;
  LossHook loss_;
  StepHooks hooks_;
  const char* name_;
  double learning_rate_ = std::numeric_limits<double>::quiet_NaN();  // NaN: set on the first step
};

// Samples in the accumulation group holding micro-batch `batch_index`, so that each micro-batch's loss is
// weighted by its share and a short last group still equals one large-batch step.
std::int64_t group_samples(const data::BatchLoader& loader, std::int64_t batch_size, int accumulation,
                           std::int64_t batch_index) {
  const std::int64_t first_batch = batch_index / accumulation * accumulation;
  const std::int64_t end_batch = std::min<std::int64_t>(first_batch + accumulation, loader.batch_count());
  return std::min(end_batch * batch_size, loader.sample_count()) - first_batch * batch_size;
}

StepContext context_of(const data::Batch& batch, const data::BatchLoader& loader, std::int64_t batch_size,
                       int epoch, const EpochLoopOptions& options) {
  const int accumulation = options.accumulation_steps;
  StepContext context;
  context.epoch = epoch;
  context.batch_index = batch.index;
  context.batch_count = loader.batch_count();
  context.optimizer_step = batch.index / accumulation;
  context.starts_group = batch.index % accumulation == 0;
  context.applies_update =
      batch.index % accumulation == accumulation - 1 || batch.index + 1 == loader.batch_count();
  if (accumulation > 1)
    context.loss_share = static_cast<double>(batch.labels.size(0)) /
                         static_cast<double>(group_samples(loader, batch_size, accumulation, batch.index));
  context.learning_rate = learning_rate_at(options.schedule, epoch, context.optimizer_step);
  return context;
}

// One epoch: every batch through the step, the loss and accuracy summed on the device.
EpochTally run_epoch(TrainingStep& step, int epoch, const EpochLoopOptions& options, const EpochHooks& hooks,
                     data::BatchLoader& loader, std::int64_t batch_size, ProgressBar& progress) {
  EpochTally tally;
  tally.epoch = epoch;
  tally.batch_count = loader.batch_count();
  tally.learning_rate = options.schedule.base_lr;
  torch::Tensor loss_sum;  // [] fp64 on the loss's device
  torch::Tensor correct;   // [] int64 on the logits' device
  const auto start = Clock::now();
  while (auto batch = loader.next()) {
    const StepContext context = context_of(*batch, loader, batch_size, epoch, options);
    const StepLoss result = step.run(*batch, context);
    if (!result.loss.defined()) {
      ++tally.dropped_batches;
      continue;
    }
    tally.learning_rate = context.learning_rate;
    const std::int64_t samples = batch->labels.size(0);
    tally.samples += samples;
    const torch::Tensor weighted = result.loss.detach().to(torch::kFloat64) * static_cast<double>(samples);
    loss_sum = loss_sum.defined() ? loss_sum + weighted : weighted;
    if (result.logits.defined()) {
      const torch::Tensor hits =
          result.logits.detach().argmax(1).eq(batch->labels.to(result.logits.device(), true)).sum();
      correct = correct.defined() ? correct + hits : hits;
    }
    if (hooks.after_step) hooks.after_step(context, result);
    if (batch->index % 50 == 0 || batch->index + 1 == loader.batch_count()) {
      const double running_loss = loss_sum.item<double>() / static_cast<double>(tally.samples);
      if (!std::isfinite(running_loss) && hooks.on_non_finite_loss)
        hooks.on_non_finite_loss(epoch, batch->index);
      progress.update(batch->index + 1,
                      "loss " + std::to_string(running_loss).substr(0, 6) + " " +
                          format_count(tally.samples / std::max(1e-9, seconds_since(start))) + " samples/s");
    }
  }
  tally.train_wall_s = seconds_since(start);
  if (loss_sum.defined()) tally.loss_sum = loss_sum.item<double>();
  if (correct.defined()) tally.correct = correct.item<std::int64_t>();
  if (!std::isfinite(tally.mean_loss()) && hooks.on_non_finite_loss)
    hooks.on_non_finite_loss(epoch, loader.batch_count());
  return tally;
}

}  // namespace

std::unique_ptr<TrainingStep> make_torch_optimizer_step(torch::optim::Optimizer& optimizer, LossHook loss,
                                                        StepHooks hooks) {
  return std::make_unique<EagerTrainingStep>(std::make_unique<TorchOptimizerUpdate>(optimizer),
                                             std::move(loss), std::move(hooks), "torch_optimizer");
}

std::unique_ptr<TrainingStep> make_fused_sgd_step(CapturableSgd& optimizer, LossHook loss, StepHooks hooks) {
  return std::make_unique<EagerTrainingStep>(std::make_unique<FusedSgdUpdate>(optimizer), std::move(loss),
                                             std::move(hooks), "fused_sgd");
}

std::unique_ptr<TrainingStep> make_loss_scaling_step(torch::optim::Optimizer& optimizer, GradScaler& scaler,
                                                     LossHook loss, StepHooks hooks) {
  return std::make_unique<EagerTrainingStep>(std::make_unique<LossScalingUpdate>(optimizer, scaler),
                                             std::move(loss), std::move(hooks), "loss_scaling");
}

void run_epochs(TrainingStep& step, const EpochLoopOptions& options, const EpochHooks& hooks) {
  EpochLoopOptions loop = options;
  for (int epoch = options.first_epoch; epoch < options.epochs; ++epoch) {
    if (hooks.before_epoch) hooks.before_epoch(epoch);
    const data::LoaderOptions loader_options = options.loader(epoch);
    data::BatchLoader loader(*options.images, *options.normalization, loader_options);
    // The schedule's steps per epoch come from the loader (a shard has fewer batches than the data set).
    loop.schedule.steps_per_epoch =
        (loader.batch_count() + options.accumulation_steps - 1) / options.accumulation_steps;
    loop.schedule.warmup_steps = options.warmup_epochs * static_cast<double>(loop.schedule.steps_per_epoch);
    ProgressBar progress(
        options.label + " " + std::to_string(epoch + 1) + "/" + std::to_string(options.epochs),
        loader.batch_count(), options.show_progress);
    const EpochTally tally = run_epoch(step, epoch, loop, hooks, loader, loader_options.batch_size, progress);
    const AfterEpoch next = hooks.after_epoch ? hooks.after_epoch(tally, progress) : AfterEpoch::next;
    progress.finish("loss " + std::to_string(tally.mean_loss()).substr(0, 6));  // unless the hook did
    if (next == AfterEpoch::stop) break;
  }
}

}  // namespace ipj::train
