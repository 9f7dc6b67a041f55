// The one epoch loop of ipj's training (the trainer, distillation, QAT, pruning's fine-tuning): batches from
// a loader, one training step strategy chosen before the loop (eager torch optimizer, fused SGD, loss
// scaling, or a CUDA graph), and hooks for the loss, after each step and after each epoch. Gradient
// accumulation weights each micro-batch by its share of its group, so that a group's update equals one large
// batch's. Hot path: no host syncs except the progress read-out every 50 batches.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "ipj/data/batch_loader.hpp"
#include "ipj/train/lr_schedule.hpp"

namespace ipj {
class ProgressBar;
}  // namespace ipj

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace ipj::train {

class CapturableSgd;
class GradScaler;

// Where a micro-batch stands in its epoch and accumulation group.
struct StepContext {
  int epoch = 0;                    // 0-based
  std::int64_t batch_index = 0;     // micro-batch in the epoch, 0-based
  std::int64_t batch_count = 0;     // micro-batches in the epoch (from the loader)
  std::int64_t optimizer_step = 0;  // accumulation group in the epoch (the schedule's step)
  bool starts_group = true;         // first micro-batch of its group: gradients are cleared before it
  bool applies_update = true;       // last micro-batch of its group: the optimizer steps after it
  double loss_share = 1.0;          // its samples / its group's samples (backward weight)
  double learning_rate = 0.0;       // the rate of its group's update
};

// What a loss hook returns for one micro-batch.
struct StepLoss {
  torch::Tensor loss;    // [] fp32: mean over the micro-batch, what backward starts from
  torch::Tensor logits;  // [B, classes]: scored against the batch's labels (undefined: not scored)
};

// The forward pass and loss of one micro-batch (moving it to the device first, if needed).
using LossHook = std::function<StepLoss(const data::Batch& batch, const StepContext& context)>;

// Called on the micro-batches whose gradients the optimizer applies (StepContext::applies_update): after the
// forward pass and before backward(), and after backward() before the optimizer step (all gradients of the
// group complete; e.g. where data-parallel training all-reduces them).
struct StepHooks {
  std::function<void(const StepContext&)> before_backward;
  std::function<void(const StepContext&)> before_optimizer_step;
};

// One training step: forward and loss through the loss hook, backward of the micro-batch's share, and the
// optimizer update on the last micro-batch of a group.
class TrainingStep {
 public:
  virtual ~TrainingStep() = default;
  // Returns the micro-batch's loss and logits, or an undefined loss when the step could not take the batch
  // (a recorded CUDA graph and a short last batch: counted as dropped).
  virtual StepLoss run(const data::Batch& batch, const StepContext& context) = 0;
  // For results: "torch_optimizer", "fused_sgd", "loss_scaling", "cuda_graph" or "linear_chain".
  virtual const char* name() const = 0;
  // For results' training_step_detail: where the step's own kernels run, when it chooses ("" otherwise).
  virtual std::string detail() const { return {}; }
};

// torch::optim as it is: zero_grad(), backward, step().
std::unique_ptr<TrainingStep> make_torch_optimizer_step(torch::optim::Optimizer& optimizer, LossHook loss,
                                                        StepHooks hooks = {});
// SGD through CapturableSgd: one-pass momentum, gradients set to none instead of zeroed.
std::unique_ptr<TrainingStep> make_fused_sgd_step(CapturableSgd& optimizer, LossHook loss,
                                                  StepHooks hooks = {});
// Dynamic loss scaling: the scaled loss backward, the step skipped on inf/NaN gradients, the scale updated.
std::unique_ptr<TrainingStep> make_loss_scaling_step(torch::optim::Optimizer& optimizer, GradScaler& scaler,
                                                     LossHook loss, StepHooks hooks = {});

// What one epoch measured (summed over the micro-batches the step took).
struct EpochTally {
  int epoch = 0;  // 0-based
  std::int64_t samples = 0;
  std::int64_t dropped_batches = 0;
  std::int64_t batch_count = 0;
  double loss_sum = 0.0;       // sum over samples of the per-batch mean loss x batch size
  std::int64_t correct = 0;    // argmax(logits) == label, over the scored batches
  double learning_rate = 0.0;  // of the epoch's last update
  double train_wall_s = 0.0;   // the loop itself, loading included
  double mean_loss() const { return samples > 0 ? loss_sum / static_cast<double>(samples) : 0.0; }
  double accuracy() const { return samples > 0 ? static_cast<double>(correct) / samples : 0.0; }
};

// What the after-epoch hook says back: go on, or stop early (e.g. the target accuracy was reached).
enum class AfterEpoch { next, stop };

struct EpochHooks {
  std::function<void(int epoch)> before_epoch;                          // before its first batch
  std::function<void(const StepContext&, const StepLoss&)> after_step;  // after each micro-batch
  // Evaluation, checkpoints, ...; it may finish the epoch's progress bar with its own summary (otherwise the
  // loop does, with "loss X").
  std::function<AfterEpoch(const EpochTally&, ProgressBar& progress)> after_epoch;
  // A non-finite running loss (checked with the progress read-out and at the epoch's end): epoch (0-based)
  // and batch. Unset: not checked.
  std::function<void(int epoch, std::int64_t batch_index)> on_non_finite_loss;
};

struct EpochLoopOptions {
  const data::ImageSet* images = nullptr;                // must outlive the loop
  const data::Normalization* normalization = nullptr;    // must outlive the loop
  std::function<data::LoaderOptions(int epoch)> loader;  // each epoch's loader options (one place)
  int first_epoch = 0;                                   // > 0 after a resume
  int epochs = 1;                                        // total, counting the ones before first_epoch
  int accumulation_steps = 1;                            // micro-batches per optimizer step
  ScheduleSpec schedule;                                 // steps_per_epoch is set from the loader
  double warmup_epochs = 0.0;   // linear warmup over this many epochs' steps (schedule.warmup_steps from it)
  std::string label = "epoch";  // progress: "<label> 3/10"
  bool show_progress = true;
};

// Runs epochs first_epoch..epochs-1 (or until after_epoch says stop) through `step`.
void run_epochs(TrainingStep& step, const EpochLoopOptions& options, const EpochHooks& hooks);

}  // namespace ipj::train
