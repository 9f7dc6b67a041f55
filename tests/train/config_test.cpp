// TrainConfig validation names the offending flag; JSON round trip; resume compatibility checks; the settings
// table (one row per setting: unique flags and keys, older keys still read, bad values named).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "ipj/core/error.hpp"
#include "ipj/train/recipe.hpp"
#include "ipj/train/train_config.hpp"
#include "ipj/train/train_settings.hpp"

namespace ipj::train {
namespace {

template <typename Action>
void expect_error_from(Action action, const std::string& setting, ErrorCategory category) {
  try {
    action();
    FAIL() << "accepted a bad " << setting;
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), category) << error.what();
    EXPECT_NE(std::string(error.what()).find(setting), std::string::npos) << error.what();
  }
}

template <typename Action>
void expect_usage_error_from(Action action, const std::string& setting) {
  expect_error_from(action, setting, ErrorCategory::usage);
}

// A value read from a file (results, checkpoint, recipe) of the wrong type or spelling is bad input naming
// the key.
void expect_bad_key(const Json& json, const std::string& key) {
  expect_error_from([&] { config_from_json(json); }, key, ErrorCategory::invalid_input);
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
  // The library names the setting where the text came from: the JSON key (bad input: a file), or the flag
  // the CLI passes (a usage error).
  const auto invalid = ErrorCategory::invalid_input;
  expect_error_from([] { config_from_json(Json{{"optimizer", "lamb"}}); }, "optimizer", invalid);
  expect_error_from([] { config_from_json(Json{{"schedule", "linear"}}); }, "schedule", invalid);
  expect_error_from([] { config_from_json(Json{{"precision", "fp8"}}); }, "precision", invalid);
  expect_error_from([] { config_from_json(Json{{"device", "tpu"}}); }, "device", invalid);
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
    if (key != "tune_threads") {
      EXPECT_EQ(written[key], value) << key;
    }
  EXPECT_EQ(written["thread_plan"], "python");  // the current name of "tune_threads": false
  EXPECT_FALSE(written.contains("tune_threads"));
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

namespace {

// A config whose every setting differs from the default.
TrainConfig config_unlike_the_defaults() {
  TrainConfig config;
  config.model = models::ModelSource::torchscript("net.pt", {3, 32, 32});
  config.data_dir = "folder";
  config.data_options.channels = 3;
  config.epochs = 5;
  config.batch_size = 64;
  config.learning_rate = 0.05;
  config.optimizer = OptimizerKind::adamw;
  config.momentum = 0.8;
  config.weight_decay = 0.01;
  config.schedule = ScheduleKind::step;
  config.step_size = 2;
  config.step_gamma = 0.5;
  config.warmup_epochs = 0.5;
  config.seed = 42;
  config.threads = 3;
  config.thread_plan = ThreadPlanChoice::python;
  config.allocator = AllocatorChoice::system;
  config.limit = 100;
  config.test_limit = 50;
  config.augment = true;
  config.prefetch_batches = 2;
  config.eval_batch_size = 500;
  config.device = DeviceSpec{true, 1};
  config.precision = Precision::bf16;
  config.loss_scale = LossScaling::none;
  config.accum = 3;
  config.memory_format = MemoryFormat::channels_last;
  config.optimizer_impl = OptimizerImpl::torch;
  config.compile = CompileMode::jit;
  config.target_acc = 0.9;
  config.measure_energy = false;
  config.energy_interval_ms = 50;
  config.cpu_tdp_w = 15.0;
  config.out_dir = "out";
  config.world_size = 2;
  return config;
}

}  // namespace

TEST(TrainSettings, EveryRowHasAUniqueFlagAndJsonKeyOfTheSameName) {
  std::set<std::string> flags, keys;
  for (const TrainSetting& setting : train_settings()) {
    if (!setting.flag.empty()) {
      EXPECT_TRUE(flags.insert(setting.flag).second) << "flag twice: " << setting.flag;
      EXPECT_EQ(setting.flag.rfind("--", 0), 0u) << setting.flag;
      EXPECT_FALSE(setting.help.empty() && setting.key != "input_shape") << setting.flag << " has no help";
    }
    for (const std::string& key : {setting.key, setting.alias})
      if (!key.empty()) {
        EXPECT_TRUE(keys.insert(key).second) << "JSON key twice: " << key;
      }
    EXPECT_TRUE(!setting.has(kTunable) || setting.has(kRecipe))
        << setting.key << ": tunable but not in recipes";
    // One name: the flag is the key spelt with '-' (a switch that turns a setting off says so: --no-energy).
    if (setting.flag.empty() || setting.key.empty()) continue;
    std::string flag = "--" + setting.key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    if (setting.key == "measure_energy") flag = "--no-energy";
    EXPECT_EQ(setting.flag, flag) << setting.key;
  }
  EXPECT_TRUE(flags.count("--accum") && keys.count("accum") && keys.count("thread_plan"));
  EXPECT_EQ(find_setting("tune_threads"), find_setting("thread_plan"));
  // The JSON form is the table's keys, in its order.
  std::vector<std::string> written;
  const Json defaults = to_json(TrainConfig{});
  for (const auto& item : defaults.items())
    written.push_back(item.key());
  std::vector<std::string> table;
  for (const TrainSetting& setting : train_settings())
    if (!setting.key.empty()) table.push_back(setting.key);
  EXPECT_EQ(written, table);
  EXPECT_EQ(recipe_keys(), setting_keys(kRecipe));
}

TEST(TrainSettings, EverySettingRoundTripsThroughJson) {
  const TrainConfig config = config_unlike_the_defaults();
  const Json json = to_json(config);
  const Json defaults = to_json(TrainConfig{});
  for (const auto& [key, value] : json.items())
    EXPECT_NE(value, defaults[key]) << key << " is not covered by this test";
  const TrainConfig back = config_from_json(json);
  EXPECT_EQ(to_json(back), json);
  EXPECT_EQ(back.accum, 3);
  EXPECT_EQ(back.thread_plan, ThreadPlanChoice::python);
  EXPECT_EQ(back.device, (DeviceSpec{true, 1}));
  EXPECT_EQ(back.model.input_shape, (std::vector<std::int64_t>{3, 32, 32}));
  EXPECT_TRUE(back.model.is_file());
  EXPECT_FALSE(back.measure_energy);
  // A recipe holds its rows' keys only and gives them back.
  const Json recipe = make_recipe(config);
  EXPECT_FALSE(recipe.contains("seed") || recipe.contains("out") || recipe.contains("tune_threads"));
  EXPECT_EQ(make_recipe(apply_recipe(TrainConfig{}, recipe)), recipe);
}

TEST(TrainSettings, OlderKeyTuneThreadsIsStillRead) {
  EXPECT_EQ(config_from_json(Json{{"tune_threads", false}}).thread_plan, ThreadPlanChoice::python);
  EXPECT_EQ(config_from_json(Json{{"tune_threads", true}}).thread_plan, ThreadPlanChoice::tuned);
  // Both present (an edited file): the current key wins.
  EXPECT_EQ(config_from_json(Json{{"tune_threads", true}, {"thread_plan", "python"}}).thread_plan,
            ThreadPlanChoice::python);
  // A recipe file of an earlier ipj: accepted, applied, and written back with the current key.
  const Json old_recipe = {
      {"schema_version", kRecipeSchemaVersion}, {"kind", "recipe"}, {"tune_threads", false}};
  EXPECT_NO_THROW(check_recipe(old_recipe, "old"));
  TrainConfig base;
  EXPECT_EQ(apply_recipe(base, old_recipe).thread_plan, ThreadPlanChoice::python);
  base.thread_plan = ThreadPlanChoice::python;
  EXPECT_EQ(apply_recipe(base, Json{{"tune_threads", true}}, {"thread_plan"}).thread_plan,
            ThreadPlanChoice::python);  // --thread-plan given on the command line wins
  EXPECT_EQ(make_recipe(apply_recipe(TrainConfig{}, old_recipe))["thread_plan"], "python");
  // Lists of values (a tune space's dimensions) are converted one by one.
  EXPECT_EQ(with_current_keys(
                Json{{"tune_threads", Json::array({true, false})}, {"batch", Json::array({64})}}, true),
            (Json{{"thread_plan", Json::array({"tuned", "python"})}, {"batch", Json::array({64})}}));
}

TEST(TrainSettings, BadValueIsInvalidInputNamingTheKey) {
  expect_bad_key(Json{{"accum", "x"}}, "accum");
  expect_bad_key(Json{{"lr", "fast"}}, "lr");
  expect_bad_key(Json{{"augment", 1}}, "augment");
  expect_bad_key(Json{{"precision", 16}}, "precision");
  expect_bad_key(Json{{"input_shape", "1,28,28"}}, "input_shape");
  expect_bad_key(Json{{"tune_threads", "yes"}}, "tune_threads");
  expect_bad_key(Json{{"thread_plan", "fast"}}, "thread_plan");
  expect_error_from(
      [] {
        config_from_json(Json{{"compile", "xla"}});
      },
      "compile must be none, jit or graphs", ErrorCategory::invalid_input);
  // A recipe file names itself and the key (exit 3).
  expect_error_from(
      [] {
        check_recipe(Json{{"schema_version", kRecipeSchemaVersion}, {"accum", "x"}}, "'r.json'");
      },
      "recipe 'r.json': \"accum\" must be a number, got \"x\"", ErrorCategory::invalid_input);
}

TEST(TrainSettings, ResumeChecksTheResumableRowsNamingTheFlag) {
  const TrainConfig saved;
  auto refused = [&](auto change, const std::string& flag) {
    TrainConfig requested = saved;
    change(requested);
    expect_usage_error_from([&] { check_resumable(saved, requested); }, "--resume: " + flag + " was ");
  };
  refused([](TrainConfig& c) { c.accum = 2; }, "--accum");
  refused([](TrainConfig& c) { c.warmup_epochs = 0.5; }, "--warmup-epochs");
  refused([](TrainConfig& c) { c.data_options.channels = 3; },
          "--resize/--channels/--mean/--std/--skip-bad-images");
  refused([](TrainConfig& c) { c.seed = 1; }, "--seed");
  // What may change on resume: epochs (constant rate), threads and their plan, prefetch, evaluation, energy.
  TrainConfig requested = saved;
  requested.epochs = 4;
  requested.threads = 1;
  requested.thread_plan = ThreadPlanChoice::python;
  requested.prefetch_batches = 0;
  requested.eval_batch_size = 10;
  requested.measure_energy = false;
  requested.out_dir = "elsewhere";
  EXPECT_NO_THROW(check_resumable(saved, requested));
}

}  // namespace ipj::train
