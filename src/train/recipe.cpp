// Recipe files: building, checking and applying them through the config's own JSON form (to_json /
// config_from_json), so that they follow TrainConfig's fields and validation.
#include "ipj/train/recipe.hpp"

#include <algorithm>

#include "ipj/core/error.hpp"

namespace ipj::train {
namespace {

bool is_listed(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// The keys that together say which model (a zoo name, or a file with its input shape): kept or applied as
// one.
bool is_model_key(const std::string& key) {
  return key == "model" || key == "model_source" || key == "input_shape";
}

[[noreturn]] void fail_recipe(const std::string& source, const std::string& message) {
  fail(ErrorCategory::invalid_input, "recipe " + source + ": " + message);
}

}  // namespace

const std::vector<std::string>& recipe_keys() {
  static const std::vector<std::string> keys = {
      "model",          "model_source", "input_shape",  "epochs",     "batch",     "lr",
      "optimizer",      "momentum",     "weight_decay", "schedule",   "step_size", "step_gamma",
      "warmup_epochs",  "threads",      "tune_threads", "allocator",  "augment",   "prefetch",
      "eval_batch",     "device",       "precision",    "loss_scale", "accum",     "memory_format",
      "optimizer_impl", "compile",      "target_acc"};
  return keys;
}

Json make_recipe(const TrainConfig& config, const Json& provenance) {
  const Json all = to_json(config);
  Json recipe;
  recipe["schema_version"] = kRecipeSchemaVersion;
  recipe["kind"] = "recipe";
  for (const auto& key : recipe_keys())
    recipe[key] = all[key];
  if (!provenance.is_null()) recipe["provenance"] = provenance;
  return recipe;
}

void check_recipe(const Json& recipe, const std::string& source) {
  if (!recipe.is_object()) fail_recipe(source, "must be a JSON object");
  if (!recipe.contains("schema_version") || !recipe["schema_version"].is_number_integer())
    fail_recipe(source, "has no integer \"schema_version\" (recipe files written by ipj tune carry 1)");
  if (recipe["schema_version"].get<int>() != kRecipeSchemaVersion)
    fail_recipe(source, "schema_version " + recipe["schema_version"].dump() +
                            " is not supported (this ipj reads " + std::to_string(kRecipeSchemaVersion) +
                            ")");
  if (recipe.contains("kind") && recipe["kind"] != "recipe")
    fail_recipe(source, "\"kind\" is " + recipe["kind"].dump() + ", expected \"recipe\"");
  const Json defaults = to_json(TrainConfig{});
  for (const auto& [key, value] : recipe.items()) {
    if (key == "schema_version" || key == "kind" || key == "provenance") continue;
    if (!is_listed(recipe_keys(), key)) {
      std::string known;
      for (const auto& name : recipe_keys())
        known += (known.empty() ? "" : ", ") + name;
      fail_recipe(source, "unknown key \"" + key + "\" (a recipe holds " + known +
                              "; run settings such as data, seed and limit are flags)");
    }
    try {
      (void)config_from_json(Json{{key, value}});
    } catch (const nlohmann::json::exception&) {
      fail_recipe(source, "\"" + key + "\" must be a " + defaults[key].type_name() + ", got " + value.dump());
    } catch (const Error& error) {  // a choice outside its names (e.g. "precision": "fp8")
      if (error.category() != ErrorCategory::usage) throw;
      fail_recipe(source, error.what());
    }
  }
  try {
    validate(apply_recipe(TrainConfig{}, recipe));
  } catch (const Error& error) {
    if (error.category() != ErrorCategory::usage) throw;
    fail_recipe(source, std::string(error.what()) + " (set by the recipe's key of that name)");
  }
}

Json read_recipe_file(const std::string& path) {
  const Json recipe = read_json_file(path);
  check_recipe(recipe, "'" + path + "'");
  return recipe;
}

TrainConfig apply_recipe(const TrainConfig& base, const Json& recipe, const std::vector<std::string>& keep) {
  Json merged = to_json(base);
  bool keep_model = false;
  for (const auto& key : keep)
    keep_model = keep_model || is_model_key(key);
  const bool recipe_names_model = recipe.contains("model");
  for (const auto& key : recipe_keys()) {
    if (is_model_key(key)) {
      if (keep_model || !recipe_names_model) continue;
      if (!recipe.contains(key)) {  // an older recipe with "model" alone: a zoo name
        merged[key] = key == "model_source" ? Json("zoo") : Json::array();
        continue;
      }
    }
    if (recipe.contains(key) && !is_listed(keep, key)) merged[key] = recipe[key];
  }
  TrainConfig config = config_from_json(merged);
  config.resume = base.resume;  // not part of the JSON form
  return config;
}

}  // namespace ipj::train
