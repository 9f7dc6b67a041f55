// Recipe files: building, checking and applying them through the config's own JSON form (to_json /
// config_from_json) and the settings table's recipe rows, so that they follow TrainConfig's fields and
// validation.
#include "ipj/train/recipe.hpp"

#include <algorithm>
#include <filesystem>

#include "ipj/core/error.hpp"
#include "ipj/train/train_settings.hpp"

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
  static const std::vector<std::string> keys = setting_keys(kRecipe);
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
  for (const auto& [key, value] : recipe.items()) {
    if (key == "schema_version" || key == "kind" || key == "provenance") continue;
    const TrainSetting* setting = find_setting(key);  // a recipe key, or an older name of one
    if (setting == nullptr || !setting->has(kRecipe)) {
      std::string known;
      for (const auto& name : recipe_keys())
        known += (known.empty() ? "" : ", ") + name;
      fail_recipe(source, "unknown key \"" + key + "\" (a recipe holds " + known +
                              "; run settings such as data, seed and limit are flags)");
    }
    try {
      (void)config_from_json(Json{{key, value}});
    } catch (const Error& error) {  // a value of the wrong type, a choice outside its names ("fp8")
      if (error.category() != ErrorCategory::invalid_input) throw;
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
  const Json settings = with_current_keys(recipe);
  Json merged = to_json(base);
  bool keep_model = false;
  for (const auto& key : keep)
    keep_model = keep_model || is_model_key(key);
  const bool recipe_names_model = settings.contains("model");
  for (const auto& key : recipe_keys()) {
    if (is_model_key(key)) {
      if (keep_model || !recipe_names_model) continue;
      if (!settings.contains(key)) {  // an older recipe with "model" alone: a zoo name
        merged[key] = key == "model_source" ? Json("zoo") : Json::array();
        continue;
      }
    }
    if (settings.contains(key) && !is_listed(keep, key)) merged[key] = settings[key];
  }
  TrainConfig config = config_from_json(merged);
  config.resume = base.resume;  // not part of the JSON form
  return config;
}

namespace {

bool same_file(const std::string& a, const std::string& b) {
  std::error_code error;
  const bool equivalent = std::filesystem::equivalent(a, b, error);
  return error ? a == b : equivalent;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string text;
  for (const std::int64_t size : shape)
    text += (text.empty() ? "" : ",") + std::to_string(size);
  return text.empty() ? "the data's images" : text;
}

// The recipe's record of the file it was tuned on, compared with the file now ("" when unchanged or unknown).
std::string file_change(const Json& recipe, const std::string& file) {
  const Json& provenance = recipe.value("provenance", Json::object());
  if (!provenance.is_object() || !provenance.contains("tuned_with") || !provenance["tuned_with"].is_object())
    return "";
  const Json& recorded = provenance["tuned_with"].value("model_file", Json(nullptr));
  if (!recorded.is_object() || !recorded.contains("xxh3_64")) return "";
  try {
    const models::FileFingerprint now = models::fingerprint_file(file);
    if (recorded.value("xxh3_64", "") == now.xxh3_64 &&
        recorded.value("bytes", std::int64_t{-1}) == now.bytes)
      return "";
  } catch (const Error&) {
    return "";  // unreadable: training reports it with its own error
  }
  return "the model file " + file + " changed since the recipe was tuned on it (size or XXH3 hash differs)";
}

}  // namespace

RecipeModelCheck check_recipe_model(const Json& recipe, const models::ModelSource& model,
                                    bool input_shape_given, const std::string& source) {
  RecipeModelCheck check{model, ""};
  if (!recipe.contains("model")) return check;
  const models::ModelSource tuned_for = apply_recipe(TrainConfig{}, recipe).model;
  const bool same_model =
      tuned_for.is_file() == model.is_file() &&
      (model.is_file() ? same_file(tuned_for.file, model.file) : tuned_for.zoo_name == model.zoo_name);
  if (!same_model) {
    check.warning = "recipe " + source + " was tuned for model " + tuned_for.label() + "; training " +
                    model.label() + " with its settings (--model overrides the recipe's model)";
    return check;
  }
  if (!model.is_file()) return check;
  if (!input_shape_given) {
    check.model.input_shape = tuned_for.input_shape;
  } else if (!tuned_for.input_shape.empty() && tuned_for.input_shape != model.input_shape) {
    check.warning = "recipe " + source + " was tuned with --input-shape " +
                    shape_text(tuned_for.input_shape) + "; training with " + shape_text(model.input_shape) +
                    " (--input-shape overrides it)";
    return check;
  }
  check.warning = file_change(recipe, model.file);
  return check;
}

}  // namespace ipj::train
