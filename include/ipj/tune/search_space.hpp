// The search space of `ipj tune`: which recipe settings vary (dimensions, each a list of values), which stay
// fixed, the search's own settings, defaults per model and the space-file format (docs/TUNE.md).
// LibTorch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ipj/core/json_io.hpp"
#include "ipj/models/model_source.hpp"
#include "ipj/train/train_config.hpp"

namespace ipj::tune {

inline constexpr int kSpaceSchemaVersion = 1;

// What the defaults and the checks depend on: the model and the machine that trains it.
struct SpaceContext {
  std::string model = "mlp";    // the zoo name or the file as given (defaults for mlp and cnn)
  bool convolutional = false;   // 4-D weights: channels_last is worth searching
  bool jit_evaluation = false;  // --compile jit can evaluate this model
  bool bf16_native = false;     // the CPU runs bf16 natively (AVX512_BF16 / AMX)
  bool cuda = false;            // training on a GPU: fp16 and (with the flag) the power limit
  bool allow_power_limit = false;
  int cores = 1;
  train::TrainConfig start;  // the first trial (ipj compare's hand-tuned recipe for built-in models)
};

struct Dimension {
  std::string key;           // a recipe key (train/recipe.hpp), or "lr_scale" / "power_limit"
  std::vector<Json> values;  // at least one; numbers ascending when the dimension is numeric
};

struct SearchSettings {
  int eta = 3;             // successive halving: keep the best 1/eta at each rung
  int min_epochs = 1;      // the first rung; rungs at min_epochs * eta^k epochs
  int initial_random = 6;  // trials sampled at random (after the start point) before local search
};

struct SearchSpace {
  std::vector<Dimension> dimensions;
  // The run's identity, in every recipe as is: model, model_source, input_shape (the start recipe's model:
  // a zoo name, or a file by its absolute path) and device. From the context, never from a space file.
  Json identity;
  Json fixed;                        // other recipe keys held constant
  std::int64_t reference_batch = 0;  // "lr" is the rate at this batch; trials scale it linearly
  SearchSettings settings;
  Json start;  // dimension key -> value of the first trial
};

// A point of the space: one value index per dimension (same order as space.dimensions).
using Point = std::vector<int>;

// A trial's settings: the recipe to train and the GPU power limit as a fraction of the default limit.
struct Candidate {
  Json recipe;                        // train/recipe.hpp object
  double power_limit_fraction = 0.0;  // 0 = leave the power limit alone
  Json values;                        // dimension key -> chosen value (for tables and logs)
};

// The context for `model` (a zoo name, or a TorchScript file with its input shape) trained on `device` here:
// whether it is convolutional (a file is loaded to see), this CPU's native precisions and cores, and ipj
// compare's hand-tuned recipe as the start (for a file: compare's mlp-like or cnn-like recipe).
// `jit_evaluation`: whether --compile jit can evaluate the model (the infer module knows; the CLI asks it).
SpaceContext make_space_context(const models::ModelSource& model, const std::string& device,
                                bool allow_power_limit, bool jit_evaluation);

// The defaults for a model on this machine (docs/TUNE.md lists them).
SearchSpace default_space(const SpaceContext& context);

// A space file's object on top of the defaults: "dimensions" (when present) replaces the default dimensions,
// "fixed" overrides single settings, "search" the search settings, "start" the first point. Throws
// ipj::Error(invalid_input) naming `source` and the key for anything malformed or invalid.
SearchSpace parse_space(const Json& json, const SpaceContext& context, const std::string& source);
SearchSpace read_space_file(const std::string& path, const SpaceContext& context);

// The space as a space-file object (parse_space(to_json(space)) gives the same space).
Json to_json(const SearchSpace& space);

// Number of points (saturates at 1e18).
double space_size(const SearchSpace& space);
Point start_point(const SearchSpace& space);
Candidate candidate_at(const SearchSpace& space, const Point& point);
// "bf16 batch 512 lr 0.2 cosine/3 ..." for progress lines: the values of the varying dimensions.
std::string describe(const Candidate& candidate);
// The settings part of describe() for a candidate's values ({"precision": "bf16", "batch": 256, ...}):
// "bf16 batch=256 ..." (lr_scale left out: the rate is printed from the recipe).
std::string describe_values(const Json& values);
// A stable text key of a point ("2.0.1...") to find repeated proposals.
std::string point_key(const Point& point);
// True when the dimension's values are numbers (neighbouring indices are neighbouring values).
bool is_numeric(const Dimension& dimension);

}  // namespace ipj::tune
