// Default spaces per model, space files (parse, check, write back) and points -> recipes. Every setting is
// checked through the trainer's own validation (train::validate), so the space follows TrainConfig.
#include "ipj/tune/search_space.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "ipj/core/error.hpp"
#include "ipj/models/catalog.hpp"
#include "ipj/train/recipe.hpp"
#include "ipj/train/train_settings.hpp"

namespace ipj::tune {
namespace {

constexpr const char* kLrScale = "lr_scale";
constexpr const char* kPowerLimit = "power_limit";

[[noreturn]] void fail_space(const std::string& source, const std::string& message) {
  fail(ErrorCategory::invalid_input, "space " + source + ": " + message);
}

bool is_listed(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

std::string join(const std::vector<std::string>& names) {
  std::string text;
  for (const auto& name : names)
    text += (text.empty() ? "" : ", ") + name;
  return text;
}

// The recipe keys that say which run this is, not how it trains (the settings table's recipe rows that are
// not tunable): the model (--model, --input-shape), the device (--device) and the target (--target-acc). They
// come from the flags, are the same in every trial and are written into recipe.json as they are; a space can
// neither vary nor fix them.
bool is_identity_key(const std::string& key) {
  const train::TrainSetting* setting = train::find_setting(key);
  return setting != nullptr && setting->has(train::kRecipe) && !setting->has(train::kTunable);
}

[[noreturn]] void fail_identity_key(const std::string& source, const std::string& where,
                                    const std::string& key) {
  fail_space(source, where + " \"" + key +
                         "\" is part of the run's identity, set by --model, --input-shape, --device and "
                         "--target-acc; a space cannot search or fix it (drop the key)");
}

// Recipe keys a space may vary or fix: the settings table's tunable rows.
std::vector<std::string> tunable_keys() {
  return train::setting_keys(train::kTunable);
}

std::vector<std::string> dimension_keys() {
  std::vector<std::string> keys = tunable_keys();
  keys.push_back(kLrScale);
  keys.push_back(kPowerLimit);
  return keys;
}

// Checks one complete recipe object through the trainer's validation; `where` names the setting.
void check_settings(const Json& recipe, const std::string& source, const std::string& where) {
  for (const auto& [key, value] : recipe.items()) {
    if (train::find_setting(key) == nullptr) continue;
    try {
      (void)train::config_from_json(Json{{key, value}});
    } catch (const Error& error) {  // a value of the wrong type, a choice outside its names ("fp8")
      if (error.category() != ErrorCategory::invalid_input) throw;
      fail_space(source, where + ": " + error.what());
    }
  }
  try {
    train::validate(train::apply_recipe(train::TrainConfig{}, recipe));
  } catch (const Error& error) {
    if (error.category() != ErrorCategory::usage) throw;
    fail_space(source, where + ": " + error.what());
  }
}

std::vector<Json> integer_values(std::vector<std::int64_t> values) {
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  return std::vector<Json>(values.begin(), values.end());
}

std::vector<Dimension> default_dimensions(const SpaceContext& context) {
  const train::TrainConfig& start = context.start;
  std::vector<Dimension> dimensions;
  std::vector<Json> precisions = {"fp32"};
  if (context.bf16_native || context.cuda) precisions.push_back("bf16");
  if (context.cuda) precisions.push_back("fp16");
  dimensions.push_back({"precision", precisions});
  // A zoo model's catalog row may set its own batch and epoch values; a TorchScript file gets the general
  // ones.
  const models::ModelEntry* entry = models::find_model_entry(context.model);
  std::vector<std::int64_t> batches = {64, 128, 256};
  if (entry != nullptr && !entry->tune.batches.empty()) batches = entry->tune.batches;
  batches.push_back(start.batch_size);
  dimensions.push_back({"batch", integer_values(batches)});
  dimensions.push_back({kLrScale, {0.5, 1.0, 2.0}});
  dimensions.push_back({"warmup_epochs", {0.0, 0.25}});
  dimensions.push_back({"schedule", {"cosine", "step", "none"}});
  std::vector<std::int64_t> epochs = {std::max(1, start.epochs / 2), start.epochs, start.epochs * 3 / 2};
  if (entry != nullptr && !entry->tune.epochs.empty()) epochs = entry->tune.epochs;
  dimensions.push_back({"epochs", integer_values(epochs)});
  dimensions.push_back({"optimizer_impl", {"fused", "torch"}});
  dimensions.push_back({"threads", integer_values({1, std::max(1, context.cores / 2), context.cores})});
  if (context.convolutional) dimensions.push_back({"memory_format", {"contiguous", "channels_last"}});
  dimensions.push_back({"prefetch", {0, 2, 4}});
  if (context.jit_evaluation) dimensions.push_back({"compile", {"none", "jit"}});
  if (context.cuda && context.allow_power_limit) dimensions.push_back({kPowerLimit, {1.0, 0.85, 0.7, 0.55}});
  // A dimension with one value is a fixed setting.
  dimensions.erase(std::remove_if(dimensions.begin(), dimensions.end(),
                                  [](const Dimension& dimension) { return dimension.values.size() < 2; }),
                   dimensions.end());
  return dimensions;
}

// The start recipe's value of a dimension, expressed in the dimension's terms.
Json start_value(const Dimension& dimension, const SpaceContext& context, const Json& fixed) {
  if (dimension.key == kLrScale || dimension.key == kPowerLimit) return 1.0;
  if (dimension.key == "threads" && context.start.threads == 0) return context.cores;
  if (dimension.key == "precision" && context.start.precision == train::Precision::automatic)
    return (context.bf16_native || context.cuda) ? "bf16" : "fp32";
  return fixed.contains(dimension.key) ? fixed[dimension.key] : Json(nullptr);
}

int index_of(const Dimension& dimension, const Json& value) {
  for (size_t index = 0; index < dimension.values.size(); ++index) {
    const Json& candidate = dimension.values[index];
    if (candidate == value) return static_cast<int>(index);
    if (candidate.is_number() && value.is_number() && candidate.get<double>() == value.get<double>())
      return static_cast<int>(index);
  }
  return -1;
}

// The start recipe's settings without the identity keys; precision "auto" resolved as the trainer would here.
Json start_recipe_settings(const SpaceContext& context) {
  Json fixed = train::make_recipe(context.start);
  fixed.erase("schema_version");
  fixed.erase("kind");
  for (const auto& key : train::recipe_keys())
    if (is_identity_key(key)) fixed.erase(key);
  if (fixed["precision"] == "auto")
    fixed["precision"] = (context.bf16_native || context.cuda) ? "bf16" : "fp32";
  return fixed;
}

// A value as a person writes it: strings without quotes.
std::string plain(const Json& value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}

Dimension parse_dimension(const std::string& key, const Json& values, const SpaceContext& context,
                          const std::string& source) {
  const std::string where = "dimensions." + key;
  if (is_identity_key(key)) fail_identity_key(source, "dimension", key);
  if (!is_listed(dimension_keys(), key))
    fail_space(source, "unknown dimension \"" + key + "\" (dimensions: " + join(dimension_keys()) + ")");
  if (!values.is_array() || values.empty() || values.size() > 64)
    fail_space(source, where + " must be a list of 1 to 64 values, got " + values.dump());
  Dimension dimension{key, std::vector<Json>(values.begin(), values.end())};
  const bool numeric = values[0].is_number();
  for (const auto& value : dimension.values)
    if (value.is_number() != numeric)
      fail_space(source, where + " mixes numbers and other values: " + values.dump());
  if (numeric)
    std::sort(dimension.values.begin(), dimension.values.end(),
              [](const Json& a, const Json& b) { return a.get<double>() < b.get<double>(); });
  for (size_t index = 1; index < dimension.values.size(); ++index)
    if (index_of(Dimension{key, {dimension.values.begin(), dimension.values.begin() + index}},
                 dimension.values[index]) >= 0)
      fail_space(source, where + " lists " + dimension.values[index].dump() + " twice");
  if (key == kPowerLimit) {
    if (!context.allow_power_limit || !context.cuda)
      fail_space(source, where +
                             " changes the GPU power limit: it needs --device cuda and --allow-power-limit "
                             "(ipj never changes the limit without that flag)");
    for (const auto& value : dimension.values)
      if (!numeric || value.get<double>() <= 0.0 || value.get<double>() > 2.0)
        fail_space(source, where + " values are fractions of the GPU's default power limit in (0, 2], got " +
                               value.dump());
  }
  if (key == kLrScale)
    for (const auto& value : dimension.values)
      if (!numeric || !(value.get<double>() > 0.0) || !std::isfinite(value.get<double>()))
        fail_space(source,
                   where + " values multiply the learning rate: positive numbers, got " + value.dump());
  if (key == "precision" && !context.cuda)
    for (const auto& value : dimension.values)
      if (value == "fp16")
        fail_space(source, where +
                               " lists fp16, which trains on GPUs only here (the CPU's autocast is "
                               "bf16-only): use fp32 and bf16");
  return dimension;
}

void parse_search_settings(const Json& json, SearchSettings& settings, const std::string& source) {
  if (!json.is_object()) fail_space(source, "\"search\" must be an object, got " + json.dump());
  auto read_int = [&](const char* key, int& field, int low, int high) {
    if (!json.contains(key)) return;
    if (!json[key].is_number_integer() || json[key].get<int>() < low || json[key].get<int>() > high)
      fail_space(source, std::string("search.") + key + " must be an integer in " + std::to_string(low) +
                             ".." + std::to_string(high) + ", got " + json[key].dump());
    field = json[key].get<int>();
  };
  for (const auto& item : json.items())
    if (!is_listed({"eta", "min_epochs", "initial_random"}, item.key()))
      fail_space(source, "unknown key search." + item.key() + " (search: eta, min_epochs, initial_random)");
  read_int("eta", settings.eta, 2, 10);
  read_int("min_epochs", settings.min_epochs, 1, 1000);
  read_int("initial_random", settings.initial_random, 1, 1000);
}

void check_whole_space(const SearchSpace& space, const std::string& source) {
  // Every single value on top of the fixed settings and the start point's other values.
  const Point start = start_point(space);
  check_settings(candidate_at(space, start).recipe, source, "the fixed settings with the start point");
  for (size_t index = 0; index < space.dimensions.size(); ++index) {
    for (size_t value = 0; value < space.dimensions[index].values.size(); ++value) {
      Point point = start;
      point[index] = static_cast<int>(value);
      check_settings(candidate_at(space, point).recipe, source,
                     "dimensions." + space.dimensions[index].key + " value " +
                         space.dimensions[index].values[value].dump());
    }
  }
}

void fill_start(SearchSpace& space, const SpaceContext& context, const Json& fixed_defaults) {
  Json start = Json::object();
  for (const auto& dimension : space.dimensions) {
    const Json wanted = space.start.contains(dimension.key) ? space.start[dimension.key]
                                                            : start_value(dimension, context, fixed_defaults);
    const int index = index_of(dimension, wanted);
    start[dimension.key] = dimension.values[index >= 0 ? static_cast<size_t>(index) : 0];
  }
  space.start = start;
}

}  // namespace

bool is_numeric(const Dimension& dimension) {
  return !dimension.values.empty() && dimension.values.front().is_number();
}

SearchSpace default_space(const SpaceContext& context) {
  SearchSpace space;
  const Json fixed_defaults = start_recipe_settings(context);
  space.dimensions = default_dimensions(context);
  // The model as the start recipe names it (a zoo name, or a file with its source and input shape) and the
  // device; the target is the tuner's (TuneOptions::target_acc).
  const Json start_recipe = train::make_recipe(context.start);
  space.identity = Json::object();
  for (const char* key : {"model", "model_source", "input_shape", "device"})
    space.identity[key] = start_recipe[key];
  space.fixed = fixed_defaults;
  for (const auto& dimension : space.dimensions)
    space.fixed.erase(dimension.key);
  space.reference_batch = context.start.batch_size * context.start.accum;
  space.start = Json::object();
  fill_start(space, context, fixed_defaults);
  return space;
}

namespace {

// The space's settings with older key names replaced by the current ones ("tune_threads" -> "thread_plan").
Json with_current_setting_keys(Json json, const std::string& source) {
  try {
    for (const char* group : {"fixed", "start", "dimensions"})
      if (json.contains(group))
        json[group] = train::with_current_keys(json[group], std::string(group) == "dimensions");
  } catch (const Error& error) {
    if (error.category() != ErrorCategory::invalid_input) throw;
    fail_space(source, error.what());
  }
  return json;
}

}  // namespace

SearchSpace parse_space(const Json& given, const SpaceContext& context, const std::string& source) {
  if (!given.is_object())
    fail_space(source, "must be a JSON object (see docs/TUNE.md, or ipj tune --print-space)");
  const Json json = with_current_setting_keys(given, source);
  if (!json.contains("schema_version") || json["schema_version"] != kSpaceSchemaVersion)
    fail_space(source, "needs \"schema_version\": " + std::to_string(kSpaceSchemaVersion) +
                           (json.contains("schema_version") ? ", got " + json["schema_version"].dump() : ""));
  for (const auto& item : json.items())
    if (!is_listed({"schema_version", "kind", "comment", "dimensions", "fixed", "search", "reference_batch",
                    "start"},
                   item.key()))
      fail_space(source, "unknown key \"" + item.key() +
                             "\" (a space holds dimensions, fixed, search, reference_batch, start, comment)");
  if (json.contains("kind") && json["kind"] != "tune-space")
    fail_space(source, "\"kind\" is " + json["kind"].dump() + ", expected \"tune-space\"");
  SearchSpace space = default_space(context);
  const Json fixed_defaults = start_recipe_settings(context);
  if (json.contains("dimensions")) {
    if (!json["dimensions"].is_object() || json["dimensions"].empty())
      fail_space(source, "\"dimensions\" must be an object of key: [values], with at least one key");
    space.dimensions.clear();
    for (const auto& [key, values] : json["dimensions"].items())
      space.dimensions.push_back(parse_dimension(key, values, context, source));
    space.fixed = fixed_defaults;
  }
  if (json.contains("fixed")) {
    if (!json["fixed"].is_object()) fail_space(source, "\"fixed\" must be an object of recipe settings");
    for (const auto& [key, value] : json["fixed"].items()) {
      if (is_identity_key(key)) fail_identity_key(source, "fixed setting", key);
      if (!is_listed(tunable_keys(), key))
        fail_space(source, "unknown fixed setting \"" + key + "\" (settings: " + join(tunable_keys()) + ")");
      space.fixed[key] = value;
    }
  }
  for (const auto& dimension : space.dimensions) {
    if (json.contains("fixed") && json["fixed"].contains(dimension.key))
      fail_space(source, "\"" + dimension.key + "\" is both fixed and a dimension: keep one");
    space.fixed.erase(dimension.key);
  }
  if (json.contains("reference_batch")) {
    const Json& value = json["reference_batch"];
    if (!value.is_number_integer() || value.get<std::int64_t>() < 1)
      fail_space(source, "\"reference_batch\" must be a positive integer, got " + value.dump());
    space.reference_batch = value.get<std::int64_t>();
  }
  if (json.contains("search")) parse_search_settings(json["search"], space.settings, source);
  space.start = Json::object();
  if (json.contains("start")) {
    if (!json["start"].is_object()) fail_space(source, "\"start\" must be an object of dimension: value");
    for (const auto& [key, value] : json["start"].items()) {
      const auto found = std::find_if(space.dimensions.begin(), space.dimensions.end(),
                                      [&](const Dimension& dimension) { return dimension.key == key; });
      if (found == space.dimensions.end())
        fail_space(source, "start." + key + " is not a dimension of this space");
      if (index_of(*found, value) < 0)
        fail_space(source, "start." + key + " = " + value.dump() + " is not one of its values");
      space.start[key] = value;
    }
  }
  fill_start(space, context, fixed_defaults);
  check_whole_space(space, source);
  return space;
}

SearchSpace read_space_file(const std::string& path, const SpaceContext& context) {
  return parse_space(read_json_file(path), context, "'" + path + "'");
}

Json to_json(const SearchSpace& space) {
  Json dimensions = Json::object();
  for (const auto& dimension : space.dimensions)
    dimensions[dimension.key] = dimension.values;
  return Json{{"schema_version", kSpaceSchemaVersion},
              {"kind", "tune-space"},
              {"reference_batch", space.reference_batch},
              {"dimensions", dimensions},
              {"fixed", space.fixed},
              {"search",
               {{"eta", space.settings.eta},
                {"min_epochs", space.settings.min_epochs},
                {"initial_random", space.settings.initial_random}}},
              {"start", space.start}};
}

double space_size(const SearchSpace& space) {
  double size = 1.0;
  for (const auto& dimension : space.dimensions)
    size = std::min(1e18, size * static_cast<double>(dimension.values.size()));
  return size;
}

Point start_point(const SearchSpace& space) {
  Point point;
  for (const auto& dimension : space.dimensions) {
    const int index =
        space.start.contains(dimension.key) ? index_of(dimension, space.start[dimension.key]) : 0;
    point.push_back(std::max(0, index));
  }
  return point;
}

Candidate candidate_at(const SearchSpace& space, const Point& point) {
  Candidate candidate;
  Json recipe = {{"schema_version", train::kRecipeSchemaVersion}, {"kind", "recipe"}};
  for (const auto& [key, value] : space.identity.items())
    recipe[key] = value;
  for (const auto& [key, value] : space.fixed.items())
    recipe[key] = value;
  double lr_scale = 1.0;
  candidate.values = Json::object();
  for (size_t index = 0; index < space.dimensions.size(); ++index) {
    const Dimension& dimension = space.dimensions[index];
    const Json& value = dimension.values.at(static_cast<size_t>(point.at(index)));
    candidate.values[dimension.key] = value;
    if (dimension.key == kLrScale) {
      lr_scale = value.get<double>();
    } else if (dimension.key == kPowerLimit) {
      candidate.power_limit_fraction = value.get<double>();
    } else {
      recipe[dimension.key] = value;
    }
  }
  // Linear scaling rule: the rate grows with the effective batch (batch x accumulation).
  const double batch = recipe.value("batch", 128.0) * recipe.value("accum", 1.0);
  const double reference = space.reference_batch > 0 ? static_cast<double>(space.reference_batch) : batch;
  recipe["lr"] = recipe.value("lr", 0.01) * lr_scale * batch / reference;
  candidate.recipe = recipe;
  return candidate;
}

std::string describe_values(const Json& values) {
  std::string text;
  for (const auto& [key, value] : values.items()) {
    if (key == kLrScale) continue;
    text += (text.empty() ? "" : " ") + (key == "precision" ? plain(value) : key + "=" + plain(value));
  }
  return text;
}

std::string describe(const Candidate& candidate) {
  const std::string text = describe_values(candidate.values);
  char rate[48];
  std::snprintf(rate, sizeof rate, " lr=%.4g", candidate.recipe.value("lr", 0.0));
  return text + rate;
}

std::string point_key(const Point& point) {
  std::string key;
  for (int index : point)
    key += (key.empty() ? "" : ".") + std::to_string(index);
  return key;
}

}  // namespace ipj::tune
