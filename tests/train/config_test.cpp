// TrainConfig validation names the offending flag; JSON round trip; resume compatibility checks.
#include <gtest/gtest.h>

#include "ipj/core/error.hpp"
#include "ipj/train/train_config.hpp"

namespace ipj::train {
namespace {

void expect_usage_error(const TrainConfig& config, const std::string& flag) {
  try {
    validate(config);
    FAIL() << "accepted a bad " << flag;
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::usage);
    EXPECT_NE(std::string(error.what()).find(flag), std::string::npos) << error.what();
  }
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
  expect_usage_error(with([](TrainConfig& c) { c.optimizer = "lamb"; }), "--optimizer");
  expect_usage_error(with([](TrainConfig& c) { c.schedule = "linear"; }), "--schedule");
  expect_usage_error(with([](TrainConfig& c) { c.momentum = 1.5; }), "--momentum");
  expect_usage_error(with([](TrainConfig& c) { c.limit = -3; }), "--limit");
  expect_usage_error(with([](TrainConfig& c) { c.resume = true; }), "--resume");
}

TEST(TrainConfig, JsonRoundTrip) {
  TrainConfig config;
  config.model = "cnn";
  config.epochs = 7;
  config.learning_rate = 0.05;
  config.schedule = "cosine";
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
  cosine.schedule = "cosine";
  TrainConfig longer = cosine;
  longer.epochs = 9;
  EXPECT_THROW(check_resumable(cosine, longer), Error);
}

}  // namespace ipj::train
