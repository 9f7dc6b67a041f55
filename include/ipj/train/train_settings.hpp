// The one table of `ipj train`'s settings: per setting the TrainConfig field, the flag, the JSON key, the
// help, the check of its value and its roles (resumable, recipe, tunable). to_json, config_from_json,
// check_resumable, recipe_keys, tune's keys and the CLI's flags are generated from it. LibTorch-free.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "ipj/core/json_io.hpp"
#include "ipj/train/train_config.hpp"

namespace ipj::train {

// What a setting takes part in (bits of TrainSetting::roles).
enum SettingRole : unsigned {
  kResumable = 1u << 0,    // --resume refuses a value that differs from the saved run's
  kRecipe = 1u << 1,       // written to and read from recipe files (recipe.hpp)
  kTunable = 1u << 2,      // a recipe key `ipj tune` may vary or fix (the other recipe keys say which run)
  kShowDefault = 1u << 3,  // `ipj train --help` shows the default value
};

// Largest sample count and batch the flags accept (the CLI's kMaxSamples and kMaxBatch).
inline constexpr std::int64_t kMaxSampleFlag = std::int64_t{1} << 40;
inline constexpr std::int64_t kMaxBatchFlag = std::int64_t{1} << 24;

// The range check of a numeric flag (the CLI turns it into its validators, docs/CLI.md "Numeric flags").
struct ValueRange {
  enum class Kind { none, whole, number, positive, seed };
  Kind kind = Kind::none;
  double min = 0.0;  // whole: a whole number in [min, max]; number: finite in [min, max]; positive: (0, max];
  double max = 0.0;  // seed: any std::uint64_t
};

// A pointer to the TrainConfig field, or std::monostate for a composite value (model, data options, device)
// that `write` and `read` spell.
using SettingField =
    std::variant<std::monostate, int TrainConfig::*, std::int64_t TrainConfig::*,
                 std::uint64_t TrainConfig::*, double TrainConfig::*, bool TrainConfig::*,
                 std::string TrainConfig::*, OptimizerKind TrainConfig::*, ScheduleKind TrainConfig::*,
                 ThreadPlanChoice TrainConfig::*, AllocatorChoice TrainConfig::*, Precision TrainConfig::*,
                 LossScaling TrainConfig::*, MemoryFormat TrainConfig::*, OptimizerImpl TrainConfig::*,
                 CompileMode TrainConfig::*>;

struct TrainSetting {
  std::string key;   // JSON key (results, checkpoints, recipes); "" = not in the JSON form (--resume)
  std::string flag;  // `ipj train` flag; "" = none; a bool flag "--no-X" sets the field to false
  std::string help;  // "" = the CLI's shared help (--input-shape)
  SettingField field;
  ValueRange range;
  unsigned roles = 0;
  std::string label;  // how messages name it when not by its flag (data options: "--resize/--channels/...")
  std::string alias;  // an older JSON key still read (the current key wins when both are present)
  Json (*from_alias)(const Json& value) = nullptr;  // the alias's value in this key's terms
  Json (*write)(const TrainConfig& config) = nullptr;
  // Composite values: reads its key(s) from the whole object. Null with a monostate field: another row reads
  // this key (model_source and input_shape go with model).
  void (*read)(TrainConfig& config, const Json& json) = nullptr;

  bool has(SettingRole role) const { return (roles & role) != 0; }
  // The flag, else the label, else "--" + the key with '-' for '_'.
  std::string name() const;
};

// Every setting, in the order of the JSON form (results.json's `config`, recipe files).
const std::vector<TrainSetting>& train_settings();
// The row with this JSON key or alias; nullptr when none.
const TrainSetting* find_setting(const std::string& key);

// The JSON keys of the rows with `role`, in table order.
std::vector<std::string> setting_keys(SettingRole role);

// `settings` (an object of JSON keys, e.g. a recipe or a tune space's "fixed") with every alias key replaced
// by its current key and value ("tune_threads": false -> "thread_plan": "python"); a current key present as
// well wins. `lists`: each value is a list of values (a tune space's dimensions). Throws like
// config_from_json for an alias value of the wrong type.
Json with_current_keys(const Json& settings, bool lists = false);

}  // namespace ipj::train
