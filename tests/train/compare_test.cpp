// The two recipes `ipj compare` runs, as docs/CLI.md describes them: the seed recipe with Python's defaults
// (threads, glibc's allocator, NCHW) and the optimized recipe with ipj's settings per model.
#include <gtest/gtest.h>

#include <cmath>

#include "ipj/train/compare.hpp"

namespace ipj::train {
namespace {

TEST(CompareRecipes, BaselineIsTheSeedRecipeWithPythonsDefaults) {
  for (const char* model : {"mlp", "cnn"}) {
    CompareConfig config;
    config.model = model;
    const TrainConfig baseline = baseline_recipe(config);
    EXPECT_EQ(baseline.precision, Precision::fp32) << model;
    EXPECT_EQ(baseline.batch_size, 128) << model;
    EXPECT_DOUBLE_EQ(baseline.learning_rate, 0.01) << model;
    EXPECT_DOUBLE_EQ(baseline.momentum, 0.9) << model;
    EXPECT_EQ(baseline.schedule, ScheduleKind::none) << model;
    EXPECT_EQ(baseline.prefetch_batches, 0) << model;
    EXPECT_EQ(baseline.thread_plan, ThreadPlanChoice::python) << model;
    EXPECT_EQ(baseline.allocator, AllocatorChoice::system) << model;
    EXPECT_EQ(baseline.optimizer_impl, OptimizerImpl::torch) << model;
    EXPECT_EQ(baseline.memory_format, MemoryFormat::contiguous) << model;
    EXPECT_EQ(baseline.compile, CompileMode::none) << model;
  }
}

TEST(CompareRecipes, OptimizedRecipeUsesChannelsLastForConvolutionsOnly) {
  CompareConfig config;
  config.model = "cnn";
  const TrainConfig cnn = optimized_recipe(config);
  EXPECT_EQ(cnn.memory_format, MemoryFormat::channels_last);
  EXPECT_EQ(cnn.precision, Precision::automatic);
  EXPECT_EQ(cnn.allocator, AllocatorChoice::tuned);
  EXPECT_EQ(cnn.optimizer_impl, OptimizerImpl::fused);
  EXPECT_EQ(cnn.thread_plan, ThreadPlanChoice::tuned);
  EXPECT_EQ(cnn.schedule, ScheduleKind::cosine);
  EXPECT_EQ(cnn.epochs, 2);
  EXPECT_EQ(cnn.batch_size, 128);
  EXPECT_DOUBLE_EQ(cnn.target_acc, 0.90);
  config.model = "mlp";
  const TrainConfig mlp = optimized_recipe(config);
  EXPECT_EQ(mlp.memory_format, MemoryFormat::contiguous);
  EXPECT_EQ(mlp.batch_size, 256);
  EXPECT_DOUBLE_EQ(mlp.target_acc, 0.88);
  // Explicit flags win over the model's defaults.
  config.optimized_epochs = 7;
  config.target_acc = 0.8;
  EXPECT_EQ(optimized_recipe(config).epochs, 7);
  EXPECT_DOUBLE_EQ(optimized_recipe(config).target_acc, 0.8);
}

TEST(CompareRecipes, PrecisionFlagSetsTheOptimizedSideOnly) {
  CompareConfig config;
  config.precision = Precision::fp32;
  EXPECT_EQ(optimized_recipe(config).precision, Precision::fp32);
  EXPECT_EQ(baseline_recipe(config).precision, Precision::fp32);
  config.precision = Precision::bf16;
  EXPECT_EQ(optimized_recipe(config).precision, Precision::bf16);
  EXPECT_EQ(baseline_recipe(config).precision, Precision::fp32);  // the seed recipe stays fp32
}

TEST(CompareSpread, MeanRangeAndSampleStddevSkipNulls) {
  const Json spread = spread_of({Json(10.0), Json(20.0), Json(nullptr)});
  EXPECT_EQ(spread["runs"], 3);
  EXPECT_EQ(spread["missing"], 1);
  EXPECT_DOUBLE_EQ(spread["mean"].get<double>(), 15.0);
  EXPECT_DOUBLE_EQ(spread["min"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(spread["max"].get<double>(), 20.0);
  EXPECT_DOUBLE_EQ(spread["stddev"].get<double>(), std::sqrt(50.0));
  EXPECT_DOUBLE_EQ(spread["relative_range"].get<double>(), 10.0 / 15.0);
  EXPECT_EQ(spread["samples"].size(), 3u);
  const Json none = spread_of({Json(nullptr)});
  EXPECT_TRUE(none["mean"].is_null());
  EXPECT_DOUBLE_EQ(spread_of({Json(4.0)})["stddev"].get<double>(), 0.0);
}

TEST(CompareSpread, MachineLoadsAverageFiguresAndAnyBusyRunMakesItBusy) {
  const Json quiet{{"before", {{"other_cpus", 0.1}, {"other_cpus_max", 0.2}, {"throttled_periods", 2}}},
                   {"during", {{"other_cpus", 0.2}, {"loadavg_1m", nullptr}, {"busy", false}}},
                   {"busy", false},
                   {"rule", "r"}};
  const Json busy{{"before", {{"other_cpus", 0.5}, {"other_cpus_max", 1.5}, {"throttled_periods", 3}}},
                  {"during", {{"other_cpus", 1.0}, {"loadavg_1m", 2.0}, {"busy", true}}},
                  {"busy", true}};
  const Json combined = combine_machine_loads({quiet, busy});
  EXPECT_TRUE(combined["busy"].get<bool>());
  EXPECT_DOUBLE_EQ(combined["before"]["other_cpus"].get<double>(), 0.3);
  EXPECT_DOUBLE_EQ(combined["before"]["other_cpus_max"].get<double>(), 1.5);
  EXPECT_EQ(combined["before"]["throttled_periods"], 5);
  EXPECT_DOUBLE_EQ(combined["during"]["other_cpus"].get<double>(), 0.6);
  EXPECT_DOUBLE_EQ(combined["during"]["loadavg_1m"].get<double>(), 2.0);  // nulls skipped
  EXPECT_TRUE(combined["during"]["busy"].get<bool>());
  EXPECT_EQ(combined["rule"], "r");
  EXPECT_FALSE(combine_machine_loads({quiet, quiet})["busy"].get<bool>());
}

}  // namespace
}  // namespace ipj::train
