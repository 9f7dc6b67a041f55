// Trials as real training runs (train::run_training), epochs reported through TrainHooks.
#include "ipj/tune/training_runner.hpp"

#include <chrono>

#include "ipj/core/error.hpp"
#include "ipj/train/recipe.hpp"

namespace ipj::tune {

TrainingTrialRunner::TrainingTrialRunner(train::TrainConfig run_settings, const data::Dataset& dataset,
                                         train::TrainHooks hooks)
    : run_settings_(std::move(run_settings)), dataset_(dataset), hooks_(std::move(hooks)) {
  hooks_.show_progress = false;  // the tuner prints one line per epoch instead of a bar
}

TrialOutcome TrainingTrialRunner::run(const TrialRequest& request, const StopCheck& should_stop) {
  train::TrainConfig config = train::apply_recipe(run_settings_, request.recipe, {"model"});
  config.seed = request.seed;
  config.target_acc = request.target_acc;
  config.out_dir.clear();  // no checkpoints: a killed trial is simply run again
  config.resume = false;
  config.measure_energy = true;

  TrialOutcome outcome;
  train::TrainHooks hooks = hooks_;
  // The compiled evaluation replaces the trainer's own only for a recipe that asks for it (--compile jit);
  // the others, and every model it cannot compile (a user's file), evaluate eagerly.
  if (config.compile != train::CompileMode::jit) hooks.evaluate = nullptr;
  hooks.on_epoch_end = [&](const train::EpochMetrics& metrics) {
    outcome.epochs.push_back({metrics.epoch, metrics.test_acc, metrics.energy_j, metrics.wall_s});
    outcome.energy_source = metrics.energy_source;
  };
  hooks.should_stop = [&](const train::EpochMetrics&) { return should_stop(outcome.epochs.back()); };
  const auto start = std::chrono::steady_clock::now();
  try {
    const train::TrainResult result = train::run_training(config, dataset_, hooks);
    outcome.energy_j = result.energy_j;
    outcome.wall_s = result.wall_s;
    outcome.energy_source = result.energy_source;
  } catch (const Error& error) {
    if (error.category() == ErrorCategory::internal || error.category() == ErrorCategory::io) throw;
    outcome.error = error.what();
    outcome.error_category = error.category();
  } catch (const std::exception& error) {  // LibTorch (c10::Error): keep the first line
    const std::string message = error.what();
    outcome.error = "LibTorch: " + message.substr(0, message.find('\n'));
  }
  if (!outcome.error.empty()) {  // what ran until the failure still counts against the budget
    outcome.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (const auto& epoch : outcome.epochs)
      outcome.energy_j += epoch.energy_j;
  }
  return outcome;
}

}  // namespace ipj::tune
