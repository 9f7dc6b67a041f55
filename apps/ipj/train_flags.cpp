// `ipj train`'s setting flags from the settings table: the typed options (numbers, texts, choices, switches)
// bound to TrainConfig's fields, and the composite ones kept as texts (--model and --input-shape are parsed
// by the command with parse_model_flags before a recipe is applied).
#include "train_flags.hpp"

#include <type_traits>
#include <variant>

#include "choice_flags.hpp"
#include "ipj/core/error.hpp"

namespace ipj::cli {
namespace {

static_assert(train::kMaxBatchFlag == kMaxBatch && train::kMaxSampleFlag == kMaxSamples,
              "the settings table and the CLI take the same largest batch and sample count");

template <typename T>
void add_field_flag(CLI::App& command, const train::TrainSetting& setting, T& value) {
  if constexpr (std::is_enum_v<T>) {
    add_choice_option(command, setting.flag, value, setting.help);
  } else if constexpr (std::is_same_v<T, bool>) {
    if (setting.flag.rfind("--no-", 0) == 0)  // a switch that turns the setting off
      command.add_flag(
          setting.flag, [&value](std::int64_t) { value = false; }, setting.help);
    else
      command.add_flag(setting.flag, value, setting.help);
  } else {
    CLI::Option* option = command.add_option(setting.flag, value, setting.help);
    if (setting.range.kind != train::ValueRange::Kind::none) option->check(range_validator(setting.range));
    if (setting.has(train::kShowDefault)) option->capture_default_str();
  }
}

// The rows whose value is composite: their flags fill texts, parsed after CLI11.
void add_text_flag(CLI::App& command, const train::TrainSetting& setting, TrainFlagTexts& texts) {
  if (setting.key == "model") {
    command.add_option(setting.flag, texts.model, setting.help)->capture_default_str();
  } else if (setting.key == "input_shape") {
    command.add_option(setting.flag, texts.input_shape, kInputShapeHelp);
  } else if (setting.key == "data_options") {
    add_data_flags(command, texts.data, true);
  } else if (setting.key == "device") {
    command.add_option(setting.flag, texts.device, setting.help)->capture_default_str();
  } else if (!setting.flag.empty()) {
    fail(ErrorCategory::internal, "setting " + setting.key + " (" + setting.flag + ") has no flag binding");
  }
}

}  // namespace

void add_train_setting_flags(CLI::App& command, train::TrainConfig& config, TrainFlagTexts& texts,
                             const FlagsBefore& before) {
  for (const train::TrainSetting& setting : train::train_settings()) {
    const auto extra = before.find(setting.flag);
    if (extra != before.end()) extra->second();
    std::visit(
        [&](auto pointer) {
          if constexpr (std::is_same_v<decltype(pointer), std::monostate>)
            add_text_flag(command, setting, texts);
          else if (!setting.flag.empty())
            add_field_flag(command, setting, config.*pointer);
        },
        setting.field);
  }
}

void apply_device_and_data_flags(train::TrainConfig& config, const TrainFlagTexts& texts) {
  config.device = train::parse_device(texts.device, "--device");
  config.data_options = data_options(texts.data);
}

CLI::Validator range_validator(const train::ValueRange& range) {
  switch (range.kind) {
    case train::ValueRange::Kind::whole:
      return integer_range(static_cast<std::int64_t>(range.min), static_cast<std::int64_t>(range.max));
    case train::ValueRange::Kind::number:
      return finite_range(range.min, range.max);
    case train::ValueRange::Kind::positive:
      return positive_number(range.max);
    case train::ValueRange::Kind::seed:
      return seed_value();
    case train::ValueRange::Kind::none:
      break;
  }
  fail(ErrorCategory::internal, "a flag without a range was given a range check");
}

std::vector<std::string> given_setting_keys(const CLI::App& command) {
  std::vector<std::string> keys;
  for (const train::TrainSetting& setting : train::train_settings())
    if (!setting.flag.empty() && !setting.key.empty() && command.count(setting.flag) > 0)
      keys.push_back(setting.key);
  return keys;
}

}  // namespace ipj::cli
