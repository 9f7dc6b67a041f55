// `ipj train`'s setting flags, generated from the settings table (train/train_settings.hpp): one option per
// row with a flag, bound to its TrainConfig field, with the row's help, range check and shown default. The
// model, input shape, data options and device are kept as texts and parsed after CLI11.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cli_support.hpp"
#include "ipj/train/train_settings.hpp"

namespace ipj::cli {

// The flags whose text becomes a composite value of the config after parsing.
struct TrainFlagTexts {
  std::string model = "mlp";
  std::string input_shape;
  std::string device = "cpu";
  DataFlags data;
};

// Other flags of the command to add just before the setting with that flag (so --help keeps their place).
using FlagsBefore = std::map<std::string, std::function<void()>>;

void add_train_setting_flags(CLI::App& command, train::TrainConfig& config, TrainFlagTexts& texts,
                             const FlagsBefore& before = {});

// Parses --device and the data flags into config.device and config.data_options; throws ipj::Error(usage)
// naming the flag. (The model texts go through parse_model_flags before a --recipe is applied; the device is
// set after it, so --device, given or not, wins over a recipe's "device", as before the table.)
void apply_device_and_data_flags(train::TrainConfig& config, const TrainFlagTexts& texts);

// The validator of a setting's range (integer_range, finite_range, positive_number, seed_value).
CLI::Validator range_validator(const train::ValueRange& range);

// The JSON keys of the settings given on this command line, which win over a --recipe file's values:
// "--weight-decay" -> "weight_decay", "--thread-plan" -> "thread_plan", "--no-energy" -> "measure_energy".
std::vector<std::string> given_setting_keys(const CLI::App& command);

}  // namespace ipj::cli
