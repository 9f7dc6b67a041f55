// Search spaces (defaults per model and machine, space files and their errors) and recipe files (round trip,
// checks, precedence of flags over the recipe).
#include <gtest/gtest.h>

#include "ipj/core/atomic_file.hpp"
#include "ipj/core/error.hpp"
#include "ipj/train/recipe.hpp"
#include "ipj/tune/search_space.hpp"
#include "support/test_support.hpp"

namespace ipj::tune {
namespace {

SpaceContext context_for(const std::string& model, bool convolutional) {
  SpaceContext context;
  context.model = model;
  context.convolutional = convolutional;
  context.jit_evaluation = true;
  context.bf16_native = true;
  context.cores = 2;
  context.start.model = model;
  context.start.batch_size = 128;
  context.start.learning_rate = 0.05;
  context.start.epochs = 2;
  context.start.precision = train::Precision::automatic;
  context.start.schedule = train::ScheduleKind::cosine;
  return context;
}

const Dimension* find(const SearchSpace& space, const std::string& key) {
  for (const auto& dimension : space.dimensions)
    if (dimension.key == key) return &dimension;
  return nullptr;
}

// parse_space must throw invalid_input whose message names the space and contains `fragment`.
void expect_space_error(const Json& json, const std::string& fragment,
                        const SpaceContext& context = context_for("mlp", false)) {
  try {
    parse_space(json, context, "'s.json'");
    FAIL() << "accepted: " << json.dump();
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::invalid_input) << error.what();
    EXPECT_NE(std::string(error.what()).find("space 's.json'"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
  }
}

Json with_dimensions(const Json& dimensions) {
  return {{"schema_version", 1}, {"dimensions", dimensions}};
}

}  // namespace

TEST(TuneSpace, DefaultsFollowTheModelAndTheMachine) {
  const SearchSpace cnn = default_space(context_for("cnn", true));
  ASSERT_NE(find(cnn, "memory_format"), nullptr);
  EXPECT_EQ(find(cnn, "precision")->values, (std::vector<Json>{"fp32", "bf16"}));
  EXPECT_EQ(find(cnn, "threads")->values, (std::vector<Json>{1, 2}));
  EXPECT_EQ(find(cnn, "power_limit"), nullptr);  // never without --allow-power-limit
  EXPECT_EQ(cnn.start["precision"], "bf16");     // the start recipe's "auto" on a bf16 CPU
  EXPECT_EQ(cnn.start["batch"], 128);
  EXPECT_EQ(cnn.start["threads"], 2);  // 0 = all cores
  EXPECT_EQ(cnn.reference_batch, 128);
  EXPECT_FALSE(cnn.fixed.contains("model"));
  EXPECT_EQ(candidate_at(cnn, start_point(cnn)).recipe["model"], "cnn");

  const SearchSpace mlp = default_space(context_for("mlp", false));
  EXPECT_EQ(find(mlp, "memory_format"), nullptr);  // no 4-D weights
  EXPECT_EQ(find(mlp, "batch")->values, (std::vector<Json>{128, 256, 512, 1024}));

  SpaceContext fp32_only = context_for("mlp", false);
  fp32_only.bf16_native = false;
  fp32_only.cores = 1;
  const SearchSpace plain = default_space(fp32_only);
  EXPECT_EQ(find(plain, "precision"), nullptr);  // one value: fixed
  EXPECT_EQ(find(plain, "threads"), nullptr);
  EXPECT_EQ(plain.fixed["precision"], "fp32");

  SpaceContext gpu = context_for("cnn", true);
  gpu.cuda = true;
  gpu.allow_power_limit = true;
  const SearchSpace on_gpu = default_space(gpu);
  EXPECT_EQ(find(on_gpu, "precision")->values.back(), "fp16");
  ASSERT_NE(find(on_gpu, "power_limit"), nullptr);
  EXPECT_EQ(on_gpu.start["power_limit"], 1.0);
}

TEST(TuneSpace, SpaceFilesRoundTripAndScaleTheLearningRate) {
  const SpaceContext context = context_for("mlp", false);
  const SearchSpace space = parse_space({{"schema_version", 1},
                                         {"dimensions", {{"batch", {512, 128}}, {"lr_scale", {1, 2}}}},
                                         {"fixed", {{"lr", 0.2}, {"epochs", 3}}},
                                         {"reference_batch", 256},
                                         {"search", {{"eta", 2}, {"initial_random", 3}}},
                                         {"start", {{"batch", 512}}}},
                                        context, "'s.json'");
  EXPECT_EQ(find(space, "batch")->values, (std::vector<Json>{128, 512}));  // numbers sorted
  EXPECT_EQ(space.settings.eta, 2);
  EXPECT_EQ(space_size(space), 4.0);
  const Candidate start = candidate_at(space, start_point(space));
  EXPECT_EQ(start.recipe["batch"], 512);
  EXPECT_DOUBLE_EQ(start.recipe["lr"].get<double>(), 0.2 * 1 * 512 / 256);
  EXPECT_EQ(start.recipe["epochs"], 3);
  train::check_recipe(start.recipe, "candidate");  // every candidate is a valid recipe
  EXPECT_EQ(to_json(parse_space(to_json(space), context, "again")), to_json(space));

  testing::TempDir dir;
  write_json_file(dir.file("space.json"), to_json(space));
  EXPECT_EQ(to_json(read_space_file(dir.file("space.json"), context)), to_json(space));
}

// Issue 26: space files (and tune_settings.json of runs begun) before "thread_plan" name it "tune_threads".
TEST(TuneSpace, OlderKeyTuneThreadsIsReadAsThreadPlan) {
  const SpaceContext context = context_for("mlp", false);
  const SearchSpace fixed =
      parse_space({{"schema_version", 1}, {"fixed", {{"tune_threads", false}}}}, context, "old");
  EXPECT_EQ(fixed.fixed["thread_plan"], "python");
  EXPECT_FALSE(fixed.fixed.contains("tune_threads"));
  EXPECT_EQ(candidate_at(fixed, start_point(fixed)).recipe["thread_plan"], "python");
  const SearchSpace searched =
      parse_space({{"schema_version", 1}, {"dimensions", {{"tune_threads", Json::array({true, false})}}}},
                  context, "old");
  ASSERT_EQ(searched.dimensions.size(), 1u);
  EXPECT_EQ(searched.dimensions[0].key, "thread_plan");
  EXPECT_EQ(searched.dimensions[0].values, (std::vector<Json>{"tuned", "python"}));
  expect_space_error({{"schema_version", 1}, {"fixed", {{"tune_threads", "yes"}}}},
                     "\"tune_threads\" must be a boolean");
}

TEST(TuneSpace, BadSpaceFilesGiveClearErrors) {
  expect_space_error(Json::array(), "must be a JSON object");
  expect_space_error({{"dimensions", {{"batch", {64}}}}}, "schema_version");
  expect_space_error({{"schema_version", 1}, {"dimension", Json::object()}}, "unknown key \"dimension\"");
  expect_space_error(with_dimensions({{"batch_size", {64}}}), "unknown dimension \"batch_size\"");
  expect_space_error(with_dimensions({{"batch", Json::array()}}), "dimensions.batch must be a list");
  expect_space_error(with_dimensions({{"batch", {64, 64}}}), "lists 64 twice");
  expect_space_error(with_dimensions({{"batch", {64, "big"}}}), "mixes numbers");
  expect_space_error(with_dimensions({{"batch", {0, 64}}}), "--batch must be at least 1");
  expect_space_error(with_dimensions({{"prefetch", {"x"}}}), "\"prefetch\" must be a number");
  expect_space_error(with_dimensions({{"precision", {"fp32", "fp8"}}}),
                     "precision must be fp32, bf16, fp16 or auto, got 'fp8'");
  expect_space_error(with_dimensions({{"precision", {"fp32", "fp16"}}}), "fp16");
  expect_space_error(with_dimensions({{"power_limit", {1.0, 0.7}}}), "--allow-power-limit");
  expect_space_error(with_dimensions({{"lr_scale", {-1}}}), "positive numbers");
  expect_space_error({{"schema_version", 1}, {"dimensions", {{"batch", {64}}}}, {"fixed", {{"batch", 32}}}},
                     "both fixed and a dimension");
  expect_space_error({{"schema_version", 1}, {"fixed", {{"seed", 3}}}}, "unknown fixed setting \"seed\"");
  // The run's identity (--model, --input-shape, --device, --target-acc) is neither searched nor fixed.
  for (const char* key : {"model", "model_source", "input_shape", "device", "target_acc"}) {
    expect_space_error(with_dimensions({{key, {1, 2}}}), std::string("dimension \"") + key + "\" is part");
    expect_space_error({{"schema_version", 1}, {"fixed", {{key, "x"}}}},
                       std::string("fixed setting \"") + key + "\" is part of the run's identity");
  }
  expect_space_error({{"schema_version", 1}, {"search", {{"eta", 1}}}},
                     "search.eta must be an integer in 2..10");
  expect_space_error({{"schema_version", 1}, {"start", {{"batch", 100}}}},
                     "start.batch = 100 is not one of its values");
  expect_space_error({{"schema_version", 1}, {"fixed", {{"step_gamma", 2.0}}}},
                     "--step-gamma must be in (0, 1]");
  testing::TempDir dir;
  write_file_atomically(dir.file("broken.json"), "{\"schema_version\": 1,");
  try {
    read_space_file(dir.file("broken.json"), context_for("mlp", false));
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::invalid_input);
    EXPECT_NE(std::string(error.what()).find("broken.json"), std::string::npos);
  }
}

TEST(TuneRecipe, RecipeFilesRoundTrip) {
  train::TrainConfig config;
  config.model = "cnn";
  config.epochs = 3;
  config.batch_size = 512;
  config.learning_rate = 0.4;
  config.schedule = train::ScheduleKind::cosine;
  config.warmup_epochs = 0.25;
  config.precision = train::Precision::bf16;
  config.memory_format = train::MemoryFormat::channels_last;
  config.prefetch_batches = 2;
  config.target_acc = 0.9;
  config.seed = 7;      // not part of a recipe
  config.limit = 1000;  // not part of a recipe
  const Json recipe = train::make_recipe(config, {{"tool", "test"}});
  EXPECT_EQ(recipe["schema_version"], train::kRecipeSchemaVersion);
  EXPECT_EQ(recipe["kind"], "recipe");
  EXPECT_FALSE(recipe.contains("seed") || recipe.contains("limit") || recipe.contains("data") ||
               recipe.contains("out"));
  testing::TempDir dir;
  write_json_file(dir.file("recipe.json"), recipe);
  const Json read_back = train::read_recipe_file(dir.file("recipe.json"));
  EXPECT_EQ(read_back, recipe);
  const train::TrainConfig applied = train::apply_recipe(train::TrainConfig{}, read_back);
  EXPECT_EQ(train::make_recipe(applied, {{"tool", "test"}}), recipe);
  EXPECT_EQ(applied.seed, 0u);  // run settings keep the base's values
  // Flags given on the command line (here: batch) win over the recipe.
  train::TrainConfig flags;
  flags.batch_size = 64;
  EXPECT_EQ(train::apply_recipe(flags, recipe, {"batch"}).batch_size, 64);
  EXPECT_EQ(train::apply_recipe(flags, recipe, {"batch"}).precision, train::Precision::bf16);
  // The model keys go together: a recipe for a user's file names the file and its input shape; --model or
  // --input-shape given as flags keep the base's model whole; an older recipe with "model" alone is a zoo
  // model.
  train::TrainConfig user = config;
  user.model = models::ModelSource::torchscript("nets/my_net.pt", {1, 28, 28});
  const Json user_recipe = train::make_recipe(user);
  EXPECT_EQ(user_recipe["model_source"], "torchscript");
  const train::TrainConfig user_applied = train::apply_recipe(train::TrainConfig{}, user_recipe);
  EXPECT_TRUE(user_applied.model.is_file());
  EXPECT_EQ(user_applied.model.file, "nets/my_net.pt");
  EXPECT_EQ(user_applied.model.input_shape, (std::vector<std::int64_t>{1, 28, 28}));
  for (const char* flag : {"model", "input_shape"}) {
    const train::TrainConfig kept = train::apply_recipe(train::TrainConfig{}, user_recipe, {flag});
    EXPECT_FALSE(kept.model.is_file()) << flag;
    EXPECT_EQ(kept.model.zoo_name, "mlp") << flag;
  }
  train::TrainConfig file_base;
  file_base.model = models::ModelSource::torchscript("other.pt");
  const train::TrainConfig old_style =
      train::apply_recipe(file_base, Json{{"schema_version", 1}, {"model", "cnn"}});
  EXPECT_FALSE(old_style.model.is_file());
  EXPECT_EQ(old_style.model.zoo_name, "cnn");
}

TEST(TuneRecipe, BadRecipesGiveClearErrors) {
  const Json good = train::make_recipe(train::TrainConfig{});
  auto expect_error = [](const Json& recipe, const std::string& fragment) {
    try {
      train::check_recipe(recipe, "'r.json'");
      FAIL() << recipe.dump();
    } catch (const Error& error) {
      EXPECT_EQ(error.category(), ErrorCategory::invalid_input);
      EXPECT_NE(std::string(error.what()).find("recipe 'r.json'"), std::string::npos) << error.what();
      EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
    }
  };
  Json recipe = good;
  recipe["seed"] = 1;
  expect_error(recipe, "unknown key \"seed\"");
  recipe = good;
  recipe["batch"] = "big";
  expect_error(recipe, "\"batch\" must be a number");
  recipe = good;
  recipe["batch"] = 0;
  expect_error(recipe, "--batch must be at least 1");
  recipe = good;
  recipe["schema_version"] = 2;
  expect_error(recipe, "schema_version 2 is not supported");
  recipe = good;
  recipe.erase("schema_version");
  expect_error(recipe, "schema_version");
  recipe = good;
  recipe["kind"] = "train";
  expect_error(recipe, "expected \"recipe\"");
  expect_error(Json::array(), "must be a JSON object");
}

TEST(TuneRecipe, ARecipeUsedWithAnotherModelSaysSo) {
  testing::TempDir dir;
  write_file_atomically(dir.file("net.pt"), "bytes of a model");
  train::TrainConfig tuned;
  tuned.model = models::ModelSource::torchscript(dir.file("net.pt"), {784});
  Json recipe =
      train::make_recipe(tuned, {{"tuned_with", {{"model_file", {{"bytes", 16}, {"xxh3_64", "?"}}}}}});
  recipe["provenance"]["tuned_with"]["model_file"]["xxh3_64"] =
      models::fingerprint_file(dir.file("net.pt")).xxh3_64;

  // The same file (spelt differently) without --input-shape: the recipe's input shape, no warning.
  const auto same = train::check_recipe_model(
      recipe, models::ModelSource::torchscript(dir.path() + "/./net.pt"), false, "'r.json'");
  EXPECT_EQ(same.warning, "");
  EXPECT_EQ(same.model.input_shape, (std::vector<std::int64_t>{784}));
  // Another input shape, another model, a zoo model: the flags win, with a warning.
  const auto shape = train::check_recipe_model(
      recipe, models::ModelSource::torchscript(dir.file("net.pt"), {1, 28, 28}), true, "'r.json'");
  EXPECT_NE(shape.warning.find("tuned with --input-shape 784; training with 1,28,28"), std::string::npos)
      << shape.warning;
  EXPECT_EQ(shape.model.input_shape, (std::vector<std::int64_t>{1, 28, 28}));
  const auto other = train::check_recipe_model(recipe, models::ModelSource("cnn"), false, "'r.json'");
  EXPECT_NE(
      other.warning.find("recipe 'r.json' was tuned for model " + dir.file("net.pt") + "; training cnn"),
      std::string::npos)
      << other.warning;
  // The file's bytes changed since tuning.
  write_file_atomically(dir.file("net.pt"), "other bytes, same length?");
  const auto changed = train::check_recipe_model(recipe, models::ModelSource::torchscript(dir.file("net.pt")),
                                                 false, "'r.json'");
  EXPECT_NE(changed.warning.find("changed since the recipe was tuned"), std::string::npos) << changed.warning;
  // Zoo recipes: the same name is silent; a recipe without a model matches anything.
  const Json zoo = train::make_recipe(train::TrainConfig{});
  EXPECT_EQ(train::check_recipe_model(zoo, models::ModelSource("mlp"), false, "'r.json'").warning, "");
  EXPECT_NE(train::check_recipe_model(zoo, models::ModelSource("cnn"), false, "'r.json'").warning, "");
  EXPECT_EQ(train::check_recipe_model(Json{{"schema_version", 1}, {"batch", 64}}, models::ModelSource("cnn"),
                                      false, "'r.json'")
                .warning,
            "");
}

}  // namespace ipj::tune
