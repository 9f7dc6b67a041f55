// TrainConfig validation names the offending flag; JSON round trip; resume compatibility checks.
#include <gtest/gtest.h>

#include "ipj/core/error.hpp"
#include "ipj/train/train_config.hpp"

namespace ipj::train {
namespace {

template <typename Action>
void expect_usage_error_from(Action action, const std::string& setting) {
  try {
    action();
    FAIL() << "accepted a bad " << setting;
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::usage);
    EXPECT_NE(std::string(error.what()).find(setting), std::string::npos) << error.what();
  }
}

void expect_usage_error(const TrainConfig& config, const std::string& flag) {
  expect_usage_error_from([&] { validate(config); }, flag);
}

}  // namespace

TEST(TrainConfig, RejectsBadValuesNamingTheFlag) {
  TrainConfig config;
  EXPECT_NO_THROW(validate(config));
  auto with = [](auto change) {
    TrainConfig config;
    change(config);
    return config;
  };
  expect_usage_error(with([](TrainConfig& c) { c.epochs = 0; }), "--epochs");
  expect_usage_error(with([](TrainConfig& c) { c.batch_size = 0; }), "--batch");
  expect_usage_error(with([](TrainConfig& c) { c.learning_rate = -1; }), "--lr");
  expect_usage_error(with([](TrainConfig& c) { c.momentum = 1.5; }), "--momentum");
  expect_usage_error(with([](TrainConfig& c) { c.limit = -3; }), "--limit");
  expect_usage_error(with([](TrainConfig& c) { c.resume = true; }), "--resume");
}

TEST(TrainConfig, ChoicesAreParsedOnceNamingTheSetting) {
  // The library names the setting where the text came from: the JSON key, or the flag the CLI passes.
  expect_usage_error_from([] { config_from_json(Json{{"optimizer", "lamb"}}); }, "optimizer");
  expect_usage_error_from([] { config_from_json(Json{{"schedule", "linear"}}); }, "schedule");
  expect_usage_error_from([] { config_from_json(Json{{"precision", "fp8"}}); }, "precision");
  expect_usage_error_from([] { config_from_json(Json{{"device", "tpu"}}); }, "device");
  expect_usage_error_from([] { parse_choice<OptimizerKind>("lamb", "--optimizer"); }, "--optimizer");
  expect_usage_error_from([] { parse_choice<MemoryFormat>("nhwc", "--memory-format"); },
                          "contiguous or channels_last");
  EXPECT_EQ(parse_choice<Precision>("auto", "--precision"), Precision::automatic);
  EXPECT_EQ(choice_name(LossScaling::automatic), "auto");
  EXPECT_EQ(choice_list<CompileMode>(), "none, jit or graphs");
  EXPECT_EQ(parse_device("cuda:1", "--device"), (DeviceSpec{true, 1}));
  EXPECT_EQ(device_name(parse_device("cuda", "--device")), "cuda");
  expect_usage_error_from([] { parse_device("cuda:x", "--device"); }, "--device");
}

TEST(TrainConfig, ConfigOfAnEarlierVersionLoadsWithItsStrings) {
  // What a results.json / checkpoint of an earlier ipj holds: every choice as a string, tune_threads a bool.
  const Json saved = Json::parse(R"({"model": "cnn", "optimizer": "adamw", "schedule": "step",
      "tune_threads": false, "allocator": "system", "device": "cpu", "precision": "auto",
      "loss_scale": "dynamic", "memory_format": "channels_last", "optimizer_impl": "torch",
      "compile": "jit"})");
  const TrainConfig config = config_from_json(saved);
  EXPECT_EQ(config.optimizer, OptimizerKind::adamw);
  EXPECT_EQ(config.schedule, ScheduleKind::step);
  EXPECT_EQ(config.thread_plan, ThreadPlanChoice::python);
  EXPECT_EQ(config.allocator, AllocatorChoice::system);
  EXPECT_EQ(config.precision, Precision::automatic);
  EXPECT_EQ(config.loss_scale, LossScaling::dynamic);
  EXPECT_EQ(config.memory_format, MemoryFormat::channels_last);
  EXPECT_EQ(config.optimizer_impl, OptimizerImpl::torch);
  EXPECT_EQ(config.compile, CompileMode::jit);
  const Json written = to_json(config);
  for (const auto& [key, value] : saved.items())
    EXPECT_EQ(written[key], value) << key;
}

TEST(TrainConfig, JsonRoundTrip) {
  TrainConfig config;
  config.model = "cnn";
  config.epochs = 7;
  config.learning_rate = 0.05;
  config.schedule = ScheduleKind::cosine;
  config.seed = 42;
  config.augment = true;
  const TrainConfig back = config_from_json(to_json(config));
  EXPECT_EQ(to_json(back), to_json(config));
  EXPECT_EQ(to_json(config)["precision"], "fp32");
}

TEST(TrainConfig, ResumeRequiresSameRecipe) {
  TrainConfig saved;
  TrainConfig requested = saved;
  requested.epochs = 5;  // more epochs is fine with a constant LR
  EXPECT_NO_THROW(check_resumable(saved, requested));
  requested.learning_rate = 0.1;
  EXPECT_THROW(check_resumable(saved, requested), Error);
  TrainConfig cosine = saved;
  cosine.schedule = ScheduleKind::cosine;
  TrainConfig longer = cosine;
  longer.epochs = 9;
  EXPECT_THROW(check_resumable(cosine, longer), Error);
}

}  // namespace ipj::train
