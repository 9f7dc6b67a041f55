// End-to-end training on real Fashion-MNIST subsets: accuracy, determinism, bit-for-bit resume, results
// files, divergence detection.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>

#include "ipj/core/error.hpp"
#include "ipj/core/json_io.hpp"
#include "ipj/train/checkpoint.hpp"
#include "ipj/train/trainer.hpp"
#include "support/test_support.hpp"
#include "train/train_fixtures.hpp"

namespace ipj::train {
namespace {

const data::Dataset& fashion_subset() {
  static const data::Dataset dataset = data::load_dataset(data::kDefaultDataDirectory, 6000, 2000);
  return dataset;
}

TrainConfig small_config() {
  TrainConfig config;
  config.model = "mlp";
  config.epochs = 2;
  config.batch_size = 64;
  config.seed = 5;
  return config;
}

void expect_same_parameters(models::Classifier& a, models::Classifier& b) {
  const auto first = a.named_parameters();
  const auto second = b.named_parameters();
  ASSERT_EQ(first.size(), second.size());
  for (const auto& item : first)
    EXPECT_TRUE(torch::equal(item.value(), second[item.key()])) << item.key();
  const auto first_buffers = a.named_buffers();
  const auto second_buffers = b.named_buffers();
  for (const auto& item : first_buffers)
    EXPECT_TRUE(torch::equal(item.value(), second_buffers[item.key()])) << item.key();
}

}  // namespace

TEST(Trainer, MlpLearnsFashionMnistSubset) {
  const TrainResult result = run_training(small_config(), fashion_subset(), quiet());
  ASSERT_EQ(result.epochs.size(), 2u);
  // 6000 samples x 2 epochs: a working pipeline reaches ~0.80; chance is 0.10, a broken normalisation ~0.6.
  EXPECT_GT(result.test_acc, 0.75);
  EXPECT_LT(result.epochs[1].loss, result.epochs[0].loss);
  EXPECT_GT(result.samples_per_s, 0.0);
  EXPECT_EQ(result.samples, 12000);
  EXPECT_EQ(result.report["schema_version"], kResultsSchemaVersion);
  EXPECT_EQ(result.report["model"]["parameters"], 669706);
}

TEST(Trainer, CnnWithBatchNormAndAugmentationLearns) {
  TrainConfig config = small_config();
  config.model = "cnn";
  config.epochs = 1;
  config.limit = 3000;
  config.augment = true;
  config.schedule = ScheduleKind::cosine;
  data::Dataset dataset = fashion_subset();
  dataset.train.truncate(3000);
  const TrainResult result = run_training(config, dataset, quiet());
  EXPECT_GT(result.test_acc, 0.60);
}

TEST(Trainer, ChannelsLastTrainsTheSameModelAsContiguous) {
  // NHWC changes the kernels' summation order only: after one epoch on 1024 samples the weights agree to
  // float rounding, and the 4-D weights really are channels-last (the layout is what buys speed).
  TrainConfig config = small_config();
  config.model = "cnn";
  config.epochs = 1;
  data::Dataset dataset = fashion_subset();
  dataset.train.truncate(1024);
  dataset.test.truncate(500);
  const TrainResult contiguous = run_training(config, dataset, quiet());
  config.memory_format = MemoryFormat::channels_last;
  const TrainResult channels_last = run_training(config, dataset, quiet());
  EXPECT_EQ(channels_last.report["config"]["memory_format"], "channels_last");
  const auto reference = contiguous.model->named_parameters();
  for (const auto& item : channels_last.model->named_parameters()) {
    if (item.value().dim() == 4) {
      EXPECT_TRUE(item.value().is_contiguous(torch::MemoryFormat::ChannelsLast)) << item.key();
    }
    EXPECT_LT((item.value() - reference[item.key()]).abs().max().item<double>(), 1e-3) << item.key();
  }
  EXPECT_NEAR(channels_last.test_acc, contiguous.test_acc, 0.01);
  EXPECT_NEAR(channels_last.epochs[0].loss, contiguous.epochs[0].loss, 1e-3);
}

TEST(Trainer, FusedSgdStepTrainsLikeTorchsOptimizer) {
  // --optimizer-impl fused (the linear-chain step for the mlp) against torch::optim::SGD: the same run up
  // to rounding (one fused multiply-add per element where torch rounds twice), with momentum and weight decay
  // and a changing rate (cosine), and the same checkpointable momentum state.
  TrainConfig config = small_config();
  config.epochs = 1;
  config.weight_decay = 5e-4;
  config.schedule = ScheduleKind::cosine;
  data::Dataset dataset = fashion_subset();
  dataset.train.truncate(1024);
  dataset.test.truncate(500);
  config.optimizer_impl = OptimizerImpl::torch;
  const TrainResult reference = run_training(config, dataset, quiet());
  config.optimizer_impl = OptimizerImpl::fused;
  const TrainResult fused = run_training(config, dataset, quiet());
  EXPECT_EQ(fused.report["config"]["optimizer_impl"], "fused");
  // The mlp is a straight chain of Linear layers: the fused implementation is its hand-written step.
  EXPECT_EQ(fused.report["training_step"], "linear_chain");
  EXPECT_EQ(reference.report["training_step"], "torch_optimizer");
  // Where its GEMMs ran: oneDNN's primitives where built in and native here, else ATen's at::mm.
  const std::string detail = fused.report["training_step_detail"].get<std::string>();
  EXPECT_TRUE(detail.rfind("fp32 GEMMs on oneDNN's matmul primitives (", 0) == 0 ||
              detail == "fp32 GEMMs through ATen (at::mm_out: OpenBLAS)")
      << detail;
  EXPECT_EQ(reference.report["training_step_detail"], "");
  const auto expected = reference.model->named_parameters();
  for (const auto& item : fused.model->named_parameters())
    EXPECT_LT((item.value() - expected[item.key()]).abs().max().item<double>(), 1e-4) << item.key();
  EXPECT_NEAR(fused.epochs[0].loss, reference.epochs[0].loss, 1e-4);
  EXPECT_THROW(parse_choice<OptimizerImpl>("sgd-ish", "--optimizer-impl"), Error);
}

TEST(Trainer, SameSeedSameWeightsDifferentSeedDifferent) {
  TrainConfig config = small_config();
  config.epochs = 1;
  const TrainResult first = run_training(config, fashion_subset(), quiet());
  const TrainResult second = run_training(config, fashion_subset(), quiet());
  expect_same_parameters(*first.model, *second.model);
  EXPECT_EQ(first.epochs[0].loss, second.epochs[0].loss);
  config.seed = 6;
  const TrainResult other = run_training(config, fashion_subset(), quiet());
  EXPECT_NE(first.epochs[0].loss, other.epochs[0].loss);
}

TEST(Trainer, ResumeEqualsUninterruptedRun) {
  for (const std::string model : {"mlp", "cnn"}) {
    testing::TempDir dir;
    data::Dataset dataset = fashion_subset();
    dataset.train.truncate(1000);
    dataset.test.truncate(500);
    TrainConfig config = small_config();
    config.model = model;
    config.limit = 1000;
    config.optimizer = model == "cnn" ? OptimizerKind::adamw : OptimizerKind::sgd;
    config.learning_rate = model == "cnn" ? 1e-3 : 0.01;
    config.out_dir = dir.file("straight");
    const TrainResult straight = run_training(config, dataset, quiet());

    config.out_dir = dir.file("interrupted");
    config.epochs = 1;
    run_training(config, dataset, quiet());
    config.epochs = 2;
    config.resume = true;
    const TrainResult resumed = run_training(config, dataset, quiet());
    EXPECT_EQ(resumed.resumed_from_epoch, 1);
    ASSERT_EQ(resumed.epochs.size(), 2u);
    expect_same_parameters(*straight.model, *resumed.model);
    EXPECT_EQ(straight.epochs[1].loss, resumed.epochs[1].loss) << model;
    EXPECT_EQ(straight.epochs[1].test_acc, resumed.epochs[1].test_acc) << model;

    const Json results = read_json_file(dir.file("interrupted/results.json"));
    EXPECT_EQ(results["schema_version"], kResultsSchemaVersion);
    EXPECT_EQ(results["complete"], true);
    EXPECT_EQ(results["epochs"].size(), 2u);
    EXPECT_EQ(read_checkpoint_state(dir.file("interrupted/checkpoint.pt")).completed_epochs, 2);
  }
}

TEST(Trainer, ResumeRefusesChangedRecipeAndMissingCheckpoint) {
  testing::TempDir dir;
  TrainConfig config = small_config();
  config.epochs = 1;
  config.out_dir = dir.file("run");
  config.resume = true;
  EXPECT_THROW(run_training(config, fashion_subset(), quiet()), Error);
  config.resume = false;
  data::Dataset dataset = fashion_subset();
  dataset.train.truncate(500);
  run_training(config, dataset, quiet());
  config.resume = true;
  config.learning_rate = 0.5;
  try {
    run_training(config, dataset, quiet());
    FAIL();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("--lr"), std::string::npos) << error.what();
  }
}

TEST(Trainer, CorruptCheckpointIsAClearError) {
  testing::TempDir dir;
  std::filesystem::create_directories(dir.file("run"));
  testing::write_bytes(dir.file("run/checkpoint.pt"), {1, 2, 3, 4});
  TrainConfig config = small_config();
  config.out_dir = dir.file("run");
  config.resume = true;
  try {
    run_training(config, fashion_subset(), quiet());
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::invalid_input);
    EXPECT_NE(std::string(error.what()).find("checkpoint.pt"), std::string::npos) << error.what();
  }
}

TEST(Trainer, DivergenceStopsWithAnExplanation) {
  TrainConfig config = small_config();
  config.epochs = 1;
  config.learning_rate = 100.0;  // the largest accepted (validate: (0, 100])
  config.momentum = 0.0;
  try {
    run_training(config, fashion_subset(), quiet());
    FAIL() << "a learning rate of 100 should diverge";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::runtime);
    EXPECT_NE(std::string(error.what()).find("learning rate"), std::string::npos) << error.what();
  }
}

}  // namespace ipj::train

namespace ipj::train {

TEST(Trainer, ResultsFileIsWrittenAfterEveryEpoch) {
  testing::TempDir dir;
  data::Dataset dataset = data::load_dataset(data::kDefaultDataDirectory, 500, 200);
  TrainConfig config;
  config.epochs = 2;
  config.out_dir = dir.file("run");
  TrainHooks hooks;
  hooks.show_progress = false;
  int epochs_seen = 0;
  hooks.on_epoch_end = [&](const EpochMetrics& metrics) {
    ++epochs_seen;
    const Json partial = read_json_file(dir.file("run/results.json"));
    EXPECT_EQ(partial["complete"], false);
    EXPECT_EQ(partial["epochs"].size(), static_cast<size_t>(metrics.epoch));
    EXPECT_FALSE(partial.contains("final"));
  };
  run_training(config, dataset, hooks);
  EXPECT_EQ(epochs_seen, 2);
  EXPECT_EQ(read_json_file(dir.file("run/results.json"))["complete"], true);
}

}  // namespace ipj::train

namespace ipj::train {

TEST(Trainer, ShouldStopHookEndsTheRunAfterThatEpoch) {
  data::Dataset dataset = data::load_dataset(data::kDefaultDataDirectory, 500, 200);
  TrainConfig config;
  config.epochs = 3;
  TrainHooks hooks;
  hooks.show_progress = false;
  std::vector<int> asked;
  hooks.should_stop = [&](const EpochMetrics& metrics) {
    asked.push_back(metrics.epoch);
    return metrics.epoch == 2;
  };
  const TrainResult result = run_training(config, dataset, hooks);
  EXPECT_EQ(asked, (std::vector<int>{1, 2}));
  ASSERT_EQ(result.epochs.size(), 2u);
  EXPECT_EQ(result.report["final"]["epochs_completed"], 2);
  EXPECT_EQ(result.report["complete"], true);
}

// The seams data-parallel training uses (include/ipj/train/trainer.hpp): a loader change (here drop_last, as
// a shard would be) drives batches and steps, the step hooks run once per optimizer update, evaluation and
// meters are replaceable, the after-epoch hook can rewrite the metrics, and a process can write no files.
TEST(TrainingLoop, HooksAreTheSeamsForDataParallelTraining) {
  testing::TempDir dir;
  const data::Dataset dataset = data::load_dataset(data::kDefaultDataDirectory, 500, 200);
  TrainConfig config;
  config.epochs = 2;
  config.batch_size = 64;
  config.accum = 2;
  config.out_dir = dir.file("run");
  TrainHooks hooks;
  hooks.show_progress = false;
  hooks.adjust_loader = [](data::LoaderOptions& options) { options.drop_last = true; };  // 7 batches of 64
  std::vector<StepContext> before_backward, before_update;
  hooks.step.before_backward = [&](const StepContext& context) { before_backward.push_back(context); };
  hooks.step.before_optimizer_step = [&](const StepContext& context) { before_update.push_back(context); };
  int evaluations = 0;
  hooks.evaluate = [&](models::Classifier&, const data::Dataset&, std::int64_t) {
    ++evaluations;
    return EvalResult{0.25, 1.5, 200, 0.0};
  };
  hooks.after_epoch = [](EpochMetrics& metrics) { metrics.samples *= 2; };  // e.g. summed over two processes
  hooks.energy_meters = [](const TrainConfig&) { return energy::MeterSet{}; };
  hooks.write_files = false;
  const TrainResult result = run_training(config, dataset, hooks);

  // 7 micro-batches in groups of 2: updates after batches 1, 3, 5 and the short last group (6), per epoch.
  ASSERT_EQ(before_backward.size(), 8u);
  ASSERT_EQ(before_update.size(), 8u);
  const std::vector<std::int64_t> update_batches = {1, 3, 5, 6, 1, 3, 5, 6};
  for (std::size_t index = 0; index < before_update.size(); ++index) {
    EXPECT_EQ(before_update[index].batch_index, update_batches[index]);
    EXPECT_TRUE(before_update[index].applies_update);
    EXPECT_EQ(before_update[index].batch_count, 7);
    EXPECT_EQ(before_backward[index].batch_index, update_batches[index]);
  }
  EXPECT_DOUBLE_EQ(before_update[3].loss_share, 1.0);  // the last group holds one micro-batch
  EXPECT_DOUBLE_EQ(before_update[0].loss_share, 0.5);
  EXPECT_EQ(evaluations, 2);
  ASSERT_EQ(result.epochs.size(), 2u);
  for (const EpochMetrics& epoch : result.epochs) {
    EXPECT_EQ(epoch.samples, 2 * 7 * 64);  // drop_last, then doubled by the after-epoch hook
    EXPECT_DOUBLE_EQ(epoch.test_acc, 0.25);
    EXPECT_DOUBLE_EQ(epoch.test_loss, 1.5);
    EXPECT_DOUBLE_EQ(epoch.energy_j, 0.0);  // no meters
  }
  EXPECT_EQ(result.report["training_step"], "fused_sgd");
  EXPECT_FALSE(std::filesystem::exists(dir.file("run")));  // write_files = false
}

TEST(Trainer, WarmupEpochsRampTheLearningRate) {
  data::Dataset dataset = data::load_dataset(data::kDefaultDataDirectory, 512, 200);
  TrainConfig config;
  config.epochs = 3;
  config.batch_size = 128;  // 4 steps per epoch
  config.learning_rate = 0.01;
  config.warmup_epochs = 2.0;  // 8 warmup steps
  TrainHooks hooks;
  hooks.show_progress = false;
  const TrainResult result = run_training(config, dataset, hooks);
  ASSERT_EQ(result.epochs.size(), 3u);
  EXPECT_NEAR(result.epochs[0].learning_rate, 0.01 * 4.0 / 8.0, 1e-12);  // the epoch's last step
  EXPECT_NEAR(result.epochs[1].learning_rate, 0.01, 1e-12);
  EXPECT_NEAR(result.epochs[2].learning_rate, 0.01, 1e-12);
  EXPECT_EQ(result.report["config"]["warmup_epochs"], 2.0);
}

}  // namespace ipj::train
