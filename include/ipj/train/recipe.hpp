// Recipe files: the subset of a training config that says how to train (precision, batch, rate, schedule,
// speed settings, target), without what says which run (data, seed, limits, output folder). `ipj tune`
// writes them; `ipj train --recipe` and `ipj compare --optimized-recipe` read them. LibTorch-free.
#pragma once

#include <string>
#include <vector>

#include "ipj/core/json_io.hpp"
#include "ipj/train/train_config.hpp"

namespace ipj::train {

// Version of the recipe layout (docs/TUNE.md "Recipe files"); bump on an incompatible change.
inline constexpr int kRecipeSchemaVersion = 1;

// The TrainConfig JSON keys a recipe may hold (model, epochs, batch, lr, ..., target_acc), in file order: the
// settings table's recipe rows (train_settings.hpp). Older keys of them are read too ("tune_threads").
const std::vector<std::string>& recipe_keys();

// {"schema_version", "kind": "recipe", <recipe keys of config>, "provenance": provenance (when not null)}.
Json make_recipe(const TrainConfig& config, const Json& provenance = nullptr);

// Checks a recipe object: schema_version, kind, known keys only, each value of the right JSON type, and
// the whole a valid training config. Throws ipj::Error(invalid_input) naming `source` (e.g. the file) and
// the key; a setting this build cannot run (e.g. --compile graphs without CUDA) stays `unsupported`.
void check_recipe(const Json& recipe, const std::string& source);

// Reads and checks a recipe file (throws like check_recipe; io when it cannot be read).
Json read_recipe_file(const std::string& path);

// `base` with every recipe key present in `recipe` applied, except those named in `keep` (JSON key names:
// the settings given as flags, which take precedence over the recipe). The model keys (model, model_source,
// input_shape) go together: kept when any of them is in `keep`, else taken from the recipe when it names a
// model (a recipe with "model" alone names a zoo model).
TrainConfig apply_recipe(const TrainConfig& base, const Json& recipe,
                         const std::vector<std::string>& keep = {});

// A recipe used with a model given as a flag (`ipj train --recipe R --model M`, compare's
// --optimized-recipe): the flag wins (apply_recipe keeps it), and this says how it relates to the model the
// recipe names.
struct RecipeModelCheck {
  models::ModelSource model;  // what to train: `model`, plus the recipe's input shape for the same file
                              // given without --input-shape
  std::string warning;        // non-empty: the recipe was made for another model, another input shape, or
                              // the file changed since (provenance.tuned_with.model_file); "" otherwise
};
// `model`: from --model/--input-shape; `input_shape_given`: whether --input-shape was given; `source` names
// the recipe in the warning. The same model: the same zoo name, or the same file
// (std::filesystem::equivalent, else the same path). A recipe that names no model matches any. Reads the file
// only to fingerprint it.
RecipeModelCheck check_recipe_model(const Json& recipe, const models::ModelSource& model,
                                    bool input_shape_given, const std::string& source);

}  // namespace ipj::train
