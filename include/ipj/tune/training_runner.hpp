// The real trial runner: trains a recipe with train::run_training on a data set loaded once, reporting each
// epoch to the tuner, which may stop it. Trials write no checkpoints.
#pragma once

#include "ipj/data/dataset.hpp"
#include "ipj/train/train_config.hpp"
#include "ipj/train/trainer.hpp"
#include "ipj/tune/trial.hpp"

namespace ipj::tune {

class TrainingTrialRunner : public TrialRunner {
 public:
  // `run_settings`: what every trial shares (model, data folder, limits, device, energy options); each
  // trial applies its recipe on top (train::apply_recipe) and its seed and target. `hooks`: the environment
  // and the compiled evaluation (--compile jit) as `ipj train` sets them (a trial uses the evaluation only
  // when its recipe says --compile jit); progress bars are turned off.
  TrainingTrialRunner(train::TrainConfig run_settings, const data::Dataset& dataset, train::TrainHooks hooks);

  // Failures of the run itself (divergence, a setting this build cannot run) come back as outcome.error;
  // internal errors and I/O errors propagate.
  TrialOutcome run(const TrialRequest& request, const StopCheck& should_stop) override;

 private:
  train::TrainConfig run_settings_;
  const data::Dataset& dataset_;
  train::TrainHooks hooks_;
};

}  // namespace ipj::tune
