// `ipj train` as a library call: a setup (process settings, seed, model, optimizer, resume, memory format),
// a training step chosen once, the epoch loop of training_loop.hpp, per-epoch evaluation, atomic checkpoints
// and results, bit-for-bit resume. TrainHooks are the seams for callers (the CLI, --compile jit, a tuner,
// data-parallel training): they change what the loop does without another loop.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ipj/core/json_io.hpp"
#include "ipj/data/batch_loader.hpp"
#include "ipj/data/dataset.hpp"
#include "ipj/energy/measurement.hpp"
#include "ipj/energy/meter.hpp"
#include "ipj/models/classifier.hpp"
#include "ipj/train/evaluate.hpp"
#include "ipj/train/train_config.hpp"
#include "ipj/train/training_loop.hpp"

namespace ipj::train {

struct EpochMetrics {
  int epoch = 0;           // 1-based
  double loss = 0.0;       // mean training cross-entropy
  double train_acc = 0.0;  // 0..1, on the training batches as seen (augmented, train mode)
  double test_acc = 0.0;   // 0..1
  double test_loss = 0.0;
  double learning_rate = 0.0;  // at the end of the epoch
  std::int64_t samples = 0;
  double train_wall_s = 0.0;  // optimisation only
  double eval_wall_s = 0.0;
  double wall_s = 0.0;                   // train + eval
  double samples_per_s = 0.0;            // samples / train_wall_s
  double energy_j = 0.0;                 // train + eval of this epoch
  energy::ReportedSource energy_source;  // none with --no-energy
};

Json to_json(const EpochMetrics& metrics);
EpochMetrics epoch_metrics_from_json(const Json& json);

struct TrainResult {
  std::vector<EpochMetrics> epochs;  // including epochs restored from a checkpoint
  double test_acc = 0.0;
  double samples_per_s = 0.0;  // over the epochs run in this process
  double wall_s = 0.0;         // this process: training + evaluation
  double train_wall_s = 0.0;
  std::int64_t samples = 0;  // trained in this process
  int resumed_from_epoch = 0;
  double energy_j = 0.0;  // this process: training + evaluation
  energy::ReportedSource energy_source;
  models::ClassifierPtr model;
  Json report;  // the full results object (what results.json holds)
};

struct TrainHooks {
  bool show_progress = true;                              // progress bar / lines on stderr
  std::function<void(const EpochMetrics&)> on_epoch_end;  // after evaluation and checkpoint
  // After on_epoch_end: true ends the run after this epoch (`ipj tune` stops trials that cannot win); the
  // results then hold the epochs run so far, as for a run that reached --target-acc.
  std::function<bool(const EpochMetrics&)> should_stop;
  Json environment;  // `ipj devices` report to embed in results

  // Seams; each is optional and the default is what `ipj train` does on its own.
  // After the setup (model built, resumed, laid out) and before the first step (e.g. one process's weights
  // broadcast to all processes training together, and their gradient all-reduce attached).
  std::function<void(models::Classifier&)> after_setup;
  // Each epoch's loader options, after training_loader_options (e.g. a shard of the data for this process).
  // Batches and steps per epoch come from the loader.
  std::function<void(data::LoaderOptions&)> adjust_loader;
  // Around backward() on micro-batches whose gradients are applied (training_loop.hpp). Not with
  // --compile graphs, which records the whole step.
  StepHooks step;
  // After the epoch's evaluation, before it is reported, checkpointed and passed to on_epoch_end: may change
  // the metrics (e.g. sum samples, losses and correct counts over processes).
  std::function<void(EpochMetrics&)> after_epoch;
  // Replaces the test-set evaluation. --compile jit needs it: a compiled copy of the model (frozen
  // TorchScript, built by the infer module from the model and its normalisation).
  std::function<EvalResult(models::Classifier&, const data::Dataset&, std::int64_t batch_size)> evaluate;
  // false: this process writes no checkpoint, model.pt or results.json (e.g. all but one of several
  // processes training together); config.out_dir is still where --resume reads from.
  bool write_files = true;
  // The energy meters of the run (default_energy_meters: none with --no-energy).
  std::function<energy::MeterSet(const TrainConfig&)> energy_meters;
  // After the final report is built, before results.json is written: may change the totals and the report
  // (e.g. the energy summed over processes). Called on every process, write_files or not.
  std::function<void(TrainResult&)> finish_report;
};

// What `ipj train` measures with: the meters found here (RAPL, NVML, else the CPU estimate with
// config.cpu_tdp_w), or none when config.measure_energy is false.
energy::MeterSet default_energy_meters(const TrainConfig& config);

// The loader options of epoch `epoch` (0-based): batch size, seed, shuffling, augmentation, prefetch.
data::LoaderOptions training_loader_options(const TrainConfig& config, int epoch);

// Runs training on an already loaded data set. Writes <out>/checkpoint.pt and <out>/results.json after every
// epoch when config.out_dir is set; with config.resume continues from <out>/checkpoint.pt.
// Throws ipj::Error (usage for bad flags, runtime when the loss diverges, io for unwritable folders).
TrainResult run_training(const TrainConfig& config, const data::Dataset& dataset,
                         const TrainHooks& hooks = {});

}  // namespace ipj::train
