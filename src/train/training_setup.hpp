// Private to the train module: everything a training run sets up before its first step, in the order it
// must happen (process settings, seed, model on its device, optimizer, resume, memory format), and the
// training-step strategy chosen once from the config.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "ipj/core/json_io.hpp"
#include "ipj/data/dataset.hpp"
#include "ipj/device/process_settings.hpp"
#include "ipj/models/classifier.hpp"
#include "ipj/train/capturable_sgd.hpp"
#include "ipj/train/grad_scaler.hpp"
#include "ipj/train/precision.hpp"
#include "ipj/train/trainer.hpp"

namespace ipj::train {

class TrainingSetup {
 public:
  // Validates the combination of config and hooks, applies the process settings (restored when the setup
  // is destroyed), seeds LibTorch, builds the model and optimizer, resumes from config.out_dir when
  // config.resume, and lays the weights out in the requested memory format.
  TrainingSetup(const TrainConfig& config, const data::Dataset& dataset, const TrainHooks& hooks);

  const TrainConfig& config;
  const PrecisionChoice precision;
  const torch::Device device;
  const bool loss_scaling;  // dynamic GradScaler (--loss-scale dynamic, or auto with fp16)
  // The CPUs and load just before the run: the thread plan's input and results' machine_load.before.
  const device::MachineState machine;
  const device::ScopedProcessSettings process_settings;
  // The plan this run would have on a quiet machine: what a mid-run re-plan grows back to.
  const device::ThreadPlan quiet_plan;
  const models::InputShape shape;
  const Json model_info;  // what checkpoints record about the model (model_setup.hpp)
  models::ClassifierPtr model;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
  GradScaler scaler;
  int start_epoch = 0;                        // epochs a resumed checkpoint had completed
  std::vector<EpochMetrics> restored_epochs;  // their metrics

  std::string checkpoint_path() const;  // "" without a run folder

  // A loader batch on the run's device, in its memory format: images [B, C, H, W], labels [B].
  struct DeviceBatch {
    torch::Tensor images;
    torch::Tensor labels;
  };
  DeviceBatch to_device(const data::Batch& batch) const;
  // The trainer's loss: the forward pass under autocast, cross-entropy in fp32.
  StepLoss classification_loss(const data::Batch& batch) const;

 private:
  void resume();
  void use_channels_last();
};

// The step strategy for the run: a CUDA graph (--compile graphs), loss scaling, the linear-chain step
// (--optimizer-impl fused, sgd, a chain of Linear layers on the CPU: linear_chain_step.hpp), fused SGD after
// autograd (--optimizer-impl fused or autograd with sgd) or torch's optimizer. `fused_sgd` receives the
// CapturableSgd the fused and graph steps use (it must outlive the step). Created after the setup, so that
// CapturableSgd shares the resumed momentum buffers in the weights' memory format.
std::unique_ptr<TrainingStep> choose_training_step(TrainingSetup& setup, LossHook loss,
                                                   const StepHooks& hooks,
                                                   std::unique_ptr<CapturableSgd>& fused_sgd);

}  // namespace ipj::train
