// The two recipes `ipj compare` runs, as docs/CLI.md describes them: the seed recipe with Python's defaults
// (threads, glibc's allocator, NCHW) and the optimized recipe with ipj's settings per model.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace ipj::train
