// run_training: a setup, one training step chosen once, the epoch loop with the trainer's hooks, the report.
#include "ipj/train/trainer.hpp"

#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>

#include "ipj/core/error.hpp"
#include "ipj/core/progress.hpp"
#include "ipj/device/thread_replan.hpp"
#include "ipj/energy/energy_monitor.hpp"
#include "ipj/train/model_setup.hpp"
#include "training_report.hpp"
#include "training_setup.hpp"

namespace ipj::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

[[noreturn]] void fail_diverged(int epoch, std::int64_t step, const TrainConfig& config) {
  fail(ErrorCategory::runtime,
       "training diverged: the loss became NaN/Inf at epoch " + std::to_string(epoch) + ", step " +
           std::to_string(step) + " (precision " + choice_name(config.precision) +
           "). Likely causes: learning rate too high (--lr " + std::to_string(config.learning_rate) +
           "; try 10x lower), an fp16 range problem (use --loss-scale dynamic, or "
           "bf16), numerically unstable ops "
           "(large logits, log of 0), or unnormalised / corrupt input data");
}

// The state of one run while its epochs go by.
class TrainingRun {
 public:
  TrainingRun(const TrainConfig& config, const data::Dataset& dataset, const TrainHooks& hooks)
      : config_(config),
        dataset_(dataset),
        hooks_(hooks),
        start_(Clock::now()),
        setup_(config, dataset, hooks),
        step_(choose_training_step(
            setup_,
            [this](const data::Batch& batch, const StepContext&) {
              return setup_.classification_loss(batch);
            },
            hooks.step, fused_sgd_)),
        report_(setup_, dataset, hooks, *step_),
        folder_(setup_, hooks.write_files),
        monitor_((hooks.energy_meters ? hooks.energy_meters : default_energy_meters)(config),
                 energy::MonitorOptions{config.energy_interval_ms,
                                        setup_.device.is_cuda()
                                            ? std::function<void()>([] { torch::cuda::synchronize(); })
                                            : nullptr}) {
    if (hooks.after_setup) hooks.after_setup(*setup_.model);
  }

  TrainResult run() {
    sampler_ = std::make_unique<device::LoadSampler>(setup_.machine.limits);
    replanner_ = std::make_unique<device::BusyReplanner>(setup_.process_settings.threads(), setup_.quiet_plan,
                                                         may_replan());
    result_.epochs = setup_.restored_epochs;
    result_.resumed_from_epoch = setup_.start_epoch;
    monitor_.begin_window("run");
    EpochHooks hooks;
    hooks.before_epoch = [this](int epoch) { begin_epoch(epoch); };
    hooks.after_epoch = [this](const EpochTally& tally, ProgressBar& progress) {
      return end_epoch(tally, progress);
    };
    hooks.after_step = [this](const StepContext&, const StepLoss&) {
      replanner_->check(sampler_->busy_intervals_in_a_row(), sampler_->quiet_intervals_in_a_row(),
                        sampler_->recent_other_cpus(), epoch_);
    };
    hooks.on_non_finite_loss = [this](int epoch, std::int64_t batch) {
      fail_diverged(epoch + 1, batch, config_);
    };
    run_epochs(*step_, loop_options(), hooks);
    return finish();
  }

 private:
  EpochLoopOptions loop_options() const {
    EpochLoopOptions options;
    options.images = &dataset_.train;
    options.normalization = &dataset_.normalization;
    options.loader = [this](int epoch) {
      data::LoaderOptions loader = training_loader_options(config_, epoch);
      if (hooks_.adjust_loader) hooks_.adjust_loader(loader);
      return loader;
    };
    options.first_epoch = setup_.start_epoch;
    options.epochs = config_.epochs;
    options.accumulation_steps = config_.accum;
    options.schedule = ScheduleSpec{config_.schedule,  config_.learning_rate, config_.epochs, 1,
                                    config_.step_size, config_.step_gamma};
    options.warmup_epochs = config_.warmup_epochs;
    options.show_progress = hooks_.show_progress;
    return options;
  }

  static std::string window_name(int epoch) { return "epoch-" + std::to_string(epoch + 1); }

  // ipj's own plan may shrink mid-run when a neighbour arrives and grow when it leaves; a plan the user fixed
  // stays.
  bool may_replan() const {
    return setup_.process_settings.threads().plan == "tuned" && config_.threads == 0 &&
           !device::static_thread_plans();
  }

  void begin_epoch(int epoch) {
    epoch_ = epoch;
    monitor_.begin_window(window_name(epoch));
    setup_.model->train();
  }

  // Evaluation, the epoch's metrics, the run folder, and whether the target accuracy stops the run.
  AfterEpoch end_epoch(const EpochTally& tally, ProgressBar& progress) {
    dropped_batches_ += tally.dropped_batches;
    EpochMetrics metrics;
    metrics.epoch = tally.epoch + 1;
    metrics.train_wall_s = tally.train_wall_s;
    metrics.samples = tally.samples;
    metrics.loss = tally.mean_loss();
    metrics.train_acc = tally.accuracy();
    metrics.samples_per_s = tally.samples / std::max(1e-9, tally.train_wall_s);
    metrics.learning_rate = tally.learning_rate;
    const EvalResult test =
        hooks_.evaluate ? hooks_.evaluate(*setup_.model, dataset_, config_.eval_batch_size)
                        : evaluate(*setup_.model, dataset_.test, dataset_.normalization,
                                   config_.eval_batch_size, setup_.precision.precision, config_.device);
    metrics.test_acc = test.accuracy;
    metrics.test_loss = test.loss;
    metrics.eval_wall_s = test.wall_s;
    metrics.wall_s = metrics.train_wall_s + metrics.eval_wall_s;
    const energy::Measurement energy = monitor_.end_window(window_name(tally.epoch));
    metrics.energy_j = energy.energy_j;
    metrics.energy_source = source_of(energy);
    if (hooks_.after_epoch) hooks_.after_epoch(metrics);
    progress.finish("loss " + std::to_string(metrics.loss).substr(0, 6) + " test acc " +
                    std::to_string(metrics.test_acc).substr(0, 6));
    result_.epochs.push_back(metrics);
    result_.samples += metrics.samples;
    result_.train_wall_s += metrics.train_wall_s;
    folder_.save_epoch(metrics.epoch, result_.epochs, report_.partial(result_.epochs));
    if (hooks_.on_epoch_end) hooks_.on_epoch_end(metrics);
    const bool reached = config_.target_acc > 0.0 && metrics.test_acc >= config_.target_acc;  // --target-acc
    const bool stopped = hooks_.should_stop && hooks_.should_stop(metrics);  // e.g. a tuner's pruning
    return reached || stopped ? AfterEpoch::stop : AfterEpoch::next;
  }

  TrainResult finish() {
    const energy::Measurement run_energy = monitor_.end_window("run");
    result_.energy_j = run_energy.energy_j;
    result_.energy_source = source_of(run_energy);
    if (!result_.epochs.empty()) result_.test_acc = result_.epochs.back().test_acc;
    result_.wall_s = seconds_since(start_);
    result_.samples_per_s = result_.train_wall_s > 0 ? result_.samples / result_.train_wall_s : 0.0;
    result_.report = report_.complete(result_, run_energy, monitor_.meter_status(), dropped_batches_);
    result_.report["machine_load"] = device::machine_load_json(setup_.machine.load, sampler_->stop());
    result_.report["threads"]["replanned"] = replanner_->to_json();
    result_.report["threads"]["replans"] = replanner_->changes_json();
    if (hooks_.finish_report) hooks_.finish_report(result_);
    folder_.save_results(result_.report);
    result_.model = setup_.model;
    return std::move(result_);
  }

  energy::ReportedSource source_of(const energy::Measurement& measurement) const {
    return config_.measure_energy ? energy::ReportedSource(measurement.source) : std::nullopt;
  }

  const TrainConfig& config_;
  const data::Dataset& dataset_;
  const TrainHooks& hooks_;
  const Clock::time_point start_;
  TrainingSetup setup_;
  std::unique_ptr<CapturableSgd> fused_sgd_;  // declared before step_, which uses it
  std::unique_ptr<TrainingStep> step_;
  TrainingReport report_;
  RunFolder folder_;
  energy::EnergyMonitor monitor_;
  TrainResult result_;
  std::unique_ptr<device::LoadSampler> sampler_;      // machine_load.during
  std::unique_ptr<device::BusyReplanner> replanner_;  // threads.replanned
  int epoch_ = 0;                                     // the epoch running (0-based)
  std::int64_t dropped_batches_ = 0;
};

}  // namespace

energy::MeterSet default_energy_meters(const TrainConfig& config) {
  if (!config.measure_energy) return energy::MeterSet{};
  energy::MeterOptions options;
  options.cpu_tdp_w = config.cpu_tdp_w;
  return energy::discover_meters(options);
}

data::LoaderOptions training_loader_options(const TrainConfig& config, int epoch) {
  data::LoaderOptions options;
  options.batch_size = config.batch_size;
  options.seed = config.seed;
  options.epoch = static_cast<std::uint64_t>(epoch);
  options.augment = config.augment;
  options.prefetch_batches = config.prefetch_batches;
  return options;
}

TrainResult run_training(const TrainConfig& config, const data::Dataset& dataset, const TrainHooks& hooks) {
  validate(config);
  if (!config.model.is_file()) return TrainingRun(config, dataset, hooks).run();
  try {  // a user's module can reach LibTorch operators that fail (e.g. no bf16 kernel): say so, no exit 70
    return TrainingRun(config, dataset, hooks).run();
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
              {"energy_source", energy::reported_source_name(metrics.energy_source)}};
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
  // Older checkpoints without the key read as "none".
  metrics.energy_source =
      energy::parse_reported_source(json.value("energy_source", std::string("none")), "epoch energy_source");
  return metrics;
}

}  // namespace ipj::train
