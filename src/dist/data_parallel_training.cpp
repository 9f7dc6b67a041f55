// One rank of a data-parallel training job, as hooks on train::run_training (trainer.hpp's seams). The
// collectives happen at the same points on every rank: after the setup (weights broadcast, Reducer built),
// in each applied step's backward (gradient buckets), at each epoch's end (BN buffers, evaluation counts,
// metrics) and once before the final report (energy). A rank that fails stops the others within the timeout.
#include "ipj/dist/data_parallel_training.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <memory>
#include <thread>

#include "ipj/core/error.hpp"
#include "ipj/dist/gradient_sync.hpp"
#include "ipj/dist/module_sync.hpp"
#include "ipj/energy/energy_report.hpp"
#include "ipj/energy/meter.hpp"
#include "ipj/train/evaluate.hpp"
#include "ipj/train/precision.hpp"

namespace ipj::dist {
namespace {

constexpr int kNoMeter = 3;  // a rank without meters of its own (node-wide counters are read by local rank 0)

// A source as a number for the all-reduce that gathers them (the enum's value; kNoMeter for none).
double source_code(const energy::ReportedSource& source) {
  return static_cast<double>(source ? static_cast<int>(*source) : kNoMeter);
}

energy::ReportedSource source_from_code(int code) {
  if (code == kNoMeter) return std::nullopt;
  return static_cast<energy::EnergySource>(code);
}

// The weakest source among the ranks that measured something (none when no rank did).
energy::ReportedSource weakest_source(const std::vector<energy::ReportedSource>& sources) {
  energy::ReportedSource weakest;
  for (const auto& source : sources)
    weakest = energy::weakest(weakest, source);
  return weakest;
}

// Every rank's `values` (the same count on each): result[rank][i]. One sum all-reduce of per-rank slots.
std::vector<std::vector<double>> gather_per_rank(ProcessGroupContext& context,
                                                 const std::vector<double>& values) {
  const std::size_t count = values.size();
  std::vector<double> slots(count * static_cast<std::size_t>(context.world_size()), 0.0);
  std::copy(values.begin(), values.end(),
            slots.begin() + static_cast<std::ptrdiff_t>(count * context.rank()));
  const std::vector<double> summed = context.all_reduce_sum(slots);
  std::vector<std::vector<double>> result;
  for (int rank = 0; rank < context.world_size(); ++rank)
    result.emplace_back(summed.begin() + static_cast<std::ptrdiff_t>(count * rank),
                        summed.begin() + static_cast<std::ptrdiff_t>(count * (rank + 1)));
  return result;
}

// Rank `rank`'s contiguous slice of the test set (the first count x rank / world .. samples): every test
// sample is scored exactly once over the ranks, without padding.
data::Dataset test_shard(const data::Dataset& dataset, int rank, int world_size) {
  data::Dataset shard;
  shard.name = dataset.name;
  shard.format = dataset.format;
  shard.directory = dataset.directory;
  shard.num_classes = dataset.num_classes;
  shard.normalization = dataset.normalization;
  const data::ImageSet& test = dataset.test;
  const std::int64_t begin = test.count * rank / world_size;
  const std::int64_t end = test.count * (rank + 1) / world_size;
  shard.test.count = end - begin;
  shard.test.channels = test.channels;
  shard.test.height = test.height;
  shard.test.width = test.width;
  const std::int64_t bytes = test.image_bytes();
  shard.test.pixels.assign(test.pixels.begin() + begin * bytes, test.pixels.begin() + end * bytes);
  shard.test.labels.assign(test.labels.begin() + begin, test.labels.begin() + end);
  return shard;
}

// The data-parallel state of one rank while train::run_training runs, and the hooks that use it.
class DataParallelRank {
 public:
  DataParallelRank(const train::TrainConfig& config, const data::Dataset& dataset,
                   const DistributedEnvironment& environment, const DataParallelOptions& options)
      : config_(config),
        context_(environment, options.backend, options.timeout,
                 config.device.cuda ? config.device.index : -1),
        test_shard_(test_shard(dataset, environment.rank, environment.world_size)),
        evaluation_precision_(train::resolve_precision_here(config.precision, config.device).precision) {}

  void install(train::TrainHooks& hooks) {
    install_step_hooks(hooks);
    install_epoch_hooks(hooks);
    hooks.write_files = context_.rank() == 0;
    hooks.energy_meters = [this](const train::TrainConfig& config) {
      if (!config.measure_energy) return energy::MeterSet{};
      energy::MeterOptions meter_options;
      meter_options.cpu_tdp_w = config.cpu_tdp_w;
      const DistributedEnvironment& environment = context_.environment();
      energy::MeterSet meters = energy::discover_meters_for_rank(meter_options, environment.local_rank,
                                                                 environment.local_world_size);
      has_meters_ = !meters.meters.empty();
      return meters;
    };
    hooks.finish_report = [this](train::TrainResult& result) { sum_run_energy(result); };
  }

 private:
  void install_step_hooks(train::TrainHooks& hooks) {
    const auto caller_loader = hooks.adjust_loader;
    hooks.adjust_loader = [this, caller_loader](data::LoaderOptions& loader) {
      if (caller_loader) caller_loader(loader);
      loader.batch_size /= context_.world_size();  // the global batch split evenly (data_parallel_config)
      loader.shard_index = context_.rank();
      loader.shard_count = context_.world_size();
    };
    const auto caller_setup = hooks.after_setup;
    hooks.after_setup = [this, caller_setup](models::Classifier& model) {
      if (caller_setup) caller_setup(model);
      broadcast_module_state(context_, model);  // also after a resume: every rank read the same checkpoint
      std::vector<torch::Tensor> trainable;
      for (const auto& parameter : model.parameters())
        if (parameter.requires_grad()) trainable.push_back(parameter);
      gradients_ = std::make_unique<GradientSynchronizer>(context_, std::move(trainable));
    };
    const auto caller_before_backward = hooks.step.before_backward;
    hooks.step.before_backward = [this, caller_before_backward](const train::StepContext& step) {
      if (caller_before_backward) caller_before_backward(step);
      gradients_->prepare_for_backward();  // only on applied micro-batches: accumulation is DDP's no_sync
    };
  }

  void install_epoch_hooks(train::TrainHooks& hooks) {
    const auto caller_evaluate = hooks.evaluate;
    hooks.evaluate = [this, caller_evaluate](models::Classifier& model, const data::Dataset&,
                                             std::int64_t batch_size) {
      average_module_buffers(context_, model);  // one set of BN statistics for evaluation and the checkpoint
      train::EvalResult local;
      if (test_shard_.test.count > 0)
        local = caller_evaluate ? caller_evaluate(model, test_shard_, batch_size)
                                : train::evaluate(model, test_shard_.test, test_shard_.normalization,
                                                  batch_size, evaluation_precision_, config_.device);
      const double samples = static_cast<double>(local.samples);
      const std::vector<std::vector<double>> ranks =
          gather_per_rank(context_, {samples, local.accuracy * samples, local.loss * samples, local.wall_s});
      train::EvalResult total;
      for (const auto& rank : ranks) {
        total.samples += static_cast<std::int64_t>(rank[0]);
        total.accuracy += rank[1];
        total.loss += rank[2];
        total.wall_s = std::max(total.wall_s, rank[3]);  // the slowest rank's
      }
      const double count = std::max<double>(1.0, static_cast<double>(total.samples));
      total.accuracy /= count;
      total.loss /= count;
      return total;
    };
    const auto caller_after_epoch = hooks.after_epoch;
    hooks.after_epoch = [this, caller_after_epoch](train::EpochMetrics& metrics) {
      sum_epoch_metrics(metrics);
      if (caller_after_epoch) caller_after_epoch(metrics);
    };
  }

  // Samples, losses, accuracy and joules over the ranks; the epoch lasts as long as its slowest rank.
  void sum_epoch_metrics(train::EpochMetrics& metrics) {
    const double samples = static_cast<double>(metrics.samples);
    const std::vector<std::vector<double>> ranks = gather_per_rank(
        context_,
        {samples, metrics.loss * samples, metrics.train_acc * samples, metrics.train_wall_s, metrics.energy_j,
         has_meters_ ? source_code(metrics.energy_source) : source_code(std::nullopt)});
    double total_samples = 0.0, loss = 0.0, correct = 0.0, train_wall_s = 0.0, joules = 0.0;
    std::vector<energy::ReportedSource> sources;
    for (const auto& rank : ranks) {
      total_samples += rank[0];
      loss += rank[1];
      correct += rank[2];
      train_wall_s = std::max(train_wall_s, rank[3]);
      joules += rank[4];
      sources.push_back(source_from_code(static_cast<int>(rank[5])));
    }
    const double count = std::max(1.0, total_samples);
    metrics.samples = static_cast<std::int64_t>(total_samples);
    metrics.loss = loss / count;
    metrics.train_acc = correct / count;
    metrics.train_wall_s = train_wall_s;
    metrics.wall_s = metrics.train_wall_s + metrics.eval_wall_s;
    metrics.samples_per_s = total_samples / std::max(1e-9, train_wall_s);
    metrics.energy_j = joules;
    metrics.energy_source = config_.measure_energy ? weakest_source(sources) : std::nullopt;
  }

  // The run's joules summed over the ranks, each rank listed with its own figure and source.
  void sum_run_energy(train::TrainResult& result) {
    const double own_source = source_code(has_meters_ ? result.energy_source : std::nullopt);
    const std::vector<std::vector<double>> ranks = gather_per_rank(context_, {result.energy_j, own_source});
    double total = 0.0;
    std::vector<energy::ReportedSource> sources;
    Json rank_list = Json::array();
    for (std::size_t rank = 0; rank < ranks.size(); ++rank) {
      total += ranks[rank][0];
      sources.push_back(config_.measure_energy ? source_from_code(static_cast<int>(ranks[rank][1]))
                                               : std::nullopt);
      rank_list.push_back(Json{{"rank", rank},
                               {"energy_j", ranks[rank][0]},
                               {"energy_source", energy::reported_source_name(sources.back())}});
    }
    result.energy_j = total;
    result.energy_source = weakest_source(sources);
    Json& report = result.report;
    Json& final_figures = report["final"];
    final_figures["energy_j"] = total;
    final_figures["energy_source"] = energy::reported_source_name(result.energy_source);
    final_figures["j_per_sample"] = result.samples > 0 ? total / static_cast<double>(result.samples) : 0.0;
    final_figures["acc_per_kj"] = energy::accuracy_per_kj(result.test_acc, total);
    report["energy"]["rank0_energy_j"] = report["energy"]["energy_j"];  // its devices and meters are listed
    report["energy"]["energy_j"] = total;
    report["energy"]["energy_source"] = energy::reported_source_name(result.energy_source);
    report["energy"]["ranks"] = rank_list;
    const DistributedEnvironment& environment = context_.environment();
    report["distributed"] = {{"world_size", environment.world_size},
                             {"local_world_size", environment.local_world_size},
                             {"backend", backend_name(context_.backend())},
                             {"timeout_s", context_.timeout().count() / 1000.0},
                             {"gradient_buckets", gradients_ ? gradients_->bucket_count() : 0},
                             {"batch_per_rank", config_.batch_size / environment.world_size},
                             {"batchnorm",
                              "local batch statistics; running averages averaged over ranks "
                              "at each epoch's end"}};
  }

  const train::TrainConfig& config_;
  ProcessGroupContext context_;
  const data::Dataset test_shard_;
  const train::Precision evaluation_precision_;
  std::unique_ptr<GradientSynchronizer> gradients_;
  bool has_meters_ = false;
};

}  // namespace

train::TrainConfig data_parallel_config(train::TrainConfig config,
                                        const DistributedEnvironment& environment) {
  const int world_size = environment.world_size;
  if (config.batch_size % world_size != 0)
    fail(ErrorCategory::usage, "--batch " + std::to_string(config.batch_size) +
                                   " is the global batch and must divide evenly over WORLD_SIZE " +
                                   std::to_string(world_size) + " ranks; use a multiple of " +
                                   std::to_string(world_size) + " (e.g. --batch " +
                                   std::to_string((config.batch_size / world_size + 1) * world_size) + ")");
  if (config.compile == train::CompileMode::graphs)
    fail(
        ErrorCategory::unsupported,
        "--compile graphs records the whole training step, so the gradients cannot be all-reduced inside it; "
        "use --compile none with --distributed");
  config.world_size = world_size;
  if (config.threads == 0)
    config.threads = std::max(
        1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(1, environment.local_world_size));
  if (config.device.cuda && config.device.index < 0) config.device.index = environment.local_rank;
  return config;
}

train::TrainResult run_data_parallel_training(const train::TrainConfig& config, const data::Dataset& dataset,
                                              train::TrainHooks hooks,
                                              const DistributedEnvironment& environment,
                                              const DataParallelOptions& options) {
  DataParallelRank rank(config, dataset, environment, options);
  rank.install(hooks);
  return train::run_training(config, dataset, hooks);
}

}  // namespace ipj::dist
