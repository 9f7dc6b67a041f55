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

// The TrainConfig JSON keys a recipe may hold (model, epochs, batch, lr, ..., target_acc), in file order.
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

}  // namespace ipj::train
