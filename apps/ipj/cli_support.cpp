// Output helpers shared by subcommands.
#include "cli_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <sstream>

#include "ipj/infer/inference_model.hpp"
#include "ipj/train/recipe.hpp"

namespace ipj::cli {

void add_output_flags(CLI::App& command, CommonOutputFlags& flags) {
  command.add_flag("--json", flags.json, "Print one JSON object on stdout (human text goes to stderr)");
  command.add_flag("--quiet,-q", flags.quiet, "No progress output on stderr");
}

void add_data_flags(CLI::App& command, DataFlags& flags, bool with_normalization) {
  command.add_option(
      "--resize", flags.resize,
      "Resize every image to H,W (bilinear, as torchvision's Resize on PIL images); needed when "
      "an image folder's images differ in size");
  command.add_option("--channels", flags.options.channels, "1 (grey) or 3 (RGB); default: from the data")
      ->check(CLI::IsMember({1, 3}));
  if (with_normalization) {
    command.add_option("--mean", flags.mean,
                       "Per-channel mean for normalisation, e.g. 0.5,0.5,0.5 (default: "
                       "computed on the training images)");
    command.add_option("--std", flags.std, "Per-channel std for normalisation (with --mean)");
  }
  command.add_flag("--skip-bad-images", flags.options.skip_bad_images,
                   "Leave corrupt or unreadable images out (counted in the results) instead of failing");
  command
      .add_option("--image-cache-mb", flags.options.image_cache_mb,
                  "Image folders: keep decoded images in memory up to this size, else decode every epoch")
      ->capture_default_str();
  command
      .add_option("--decode-threads", flags.options.decode_threads,
                  "Image folders: decoding threads (0 = one per core)")
      ->capture_default_str();
}

namespace {

std::vector<float> parse_float_list(const std::string& text, const std::string& flag) {
  std::vector<float> values;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, ',')) {
    std::size_t used = 0;
    try {
      values.push_back(std::stof(part, &used));
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != part.size())
      fail(ErrorCategory::usage,
           flag + " '" + text + "': expected numbers separated by commas, e.g. " + flag + " 0.5,0.5,0.5");
  }
  return values;
}

}  // namespace

data::DataOptions data_options(const DataFlags& flags) {
  data::DataOptions options = flags.options;
  if (!flags.resize.empty()) options.resize = data::parse_image_size(flags.resize, "--resize");
  if (!flags.mean.empty()) options.mean = parse_float_list(flags.mean, "--mean");
  if (!flags.std.empty()) options.std = parse_float_list(flags.std, "--std");
  data::validate(options);
  return options;
}

std::string default_run_folder(const std::string& name) {
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
  return "runs/" + name + "-" + stamp;
}

const char* const kInputShapeHelp =
    "TorchScript --model: what its forward takes per sample, C,H,W (the data's images, the default) or a "
    "flat size N (batches become [B, N])";

models::ModelSource parse_model_flags(const std::string& model, const std::string& input_shape,
                                      const std::string& model_flag) {
  const std::vector<std::int64_t> shape =
      input_shape.empty() ? std::vector<std::int64_t>{} : infer::parse_shape(input_shape, "--input-shape");
  return models::parse_model_source(model, shape, model_flag);
}

CLI::Validator finite_range(double min, double max) {
  const std::string range = "[" + format_number("%g", min) + ", " + format_number("%g", max) + "]";
  return CLI::Validator(
      [min, max, range](std::string& text) -> std::string {
        double value = 0.0;
        if (!CLI::detail::lexical_cast(text, value)) return "'" + text + "' is not a number";
        if (!std::isfinite(value) || value < min || value > max)
          return "'" + text + "' is out of range: give a finite number in " + range;
        return "";
      },
      "NUMBER in " + range);
}

void print_json(const Json& value) {
  std::cout << value.dump() << std::endl;
}

std::vector<std::string> given_config_keys(const CLI::App& command) {
  std::vector<std::string> keys;
  for (const CLI::Option* option : command.get_options()) {
    if (option->count() == 0 || option->get_lnames().empty()) continue;
    std::string key = option->get_lnames().front();
    std::replace(key.begin(), key.end(), '-', '_');
    if (key == "thread_plan") key = "tune_threads";
    if (key == "no_energy") key = "measure_energy";
    keys.push_back(key);
  }
  return keys;
}

void check_model_against_recipe(const CLI::App& command, const Json& recipe, const std::string& recipe_path,
                                models::ModelSource& model) {
  const bool shape_given = command.count("--model") == 0 || command.count("--input-shape") > 0;
  const train::RecipeModelCheck check =
      train::check_recipe_model(recipe, model, shape_given, "'" + recipe_path + "'");
  model = check.model;
  if (!check.warning.empty()) std::cerr << "ipj: warning: " << check.warning << "\n";
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, ','))
    if (!part.empty()) parts.push_back(part);
  return parts;
}

std::vector<float> parse_floats(const std::string& text, const std::string& flag) {
  std::vector<float> values;
  for (const auto& part : split_commas(text)) {
    float value = 0.0f;
    try {
      std::size_t used = 0;
      value = std::stof(part, &used);
      if (used != part.size()) throw std::invalid_argument(part);
    } catch (const std::exception&) {
      fail(ErrorCategory::usage, flag + " '" + text + "': expected numbers separated by commas");
    }
    if (!std::isfinite(value) || std::fabs(value) > 1e6)
      fail(ErrorCategory::usage, flag + " '" + text + "': values must be finite numbers within +-1e6");
    values.push_back(value);
  }
  return values;
}

void add_model_input_flags(CLI::App& command, ModelInputFlags& flags) {
  command.add_option("--input-shape", flags.input_shape, kInputShapeHelp);
  command.add_option("--mean", flags.mean, "TorchScript preprocessing: per-channel mean (pixels in [0,1])");
  command.add_option("--std", flags.std, "TorchScript preprocessing: per-channel std");
}

void parse_model_input_flags(const ModelInputFlags& flags, std::vector<std::int64_t>& shape,
                             std::vector<float>& mean, std::vector<float>& std) {
  if (!flags.input_shape.empty()) shape = infer::parse_shape(flags.input_shape, "--input-shape");
  if (!flags.mean.empty()) mean = parse_floats(flags.mean, "--mean");
  if (!flags.std.empty()) std = parse_floats(flags.std, "--std");
  if (mean.size() != std.size())
    fail(ErrorCategory::usage, "--mean and --std need the same number of values");
  for (const float value : std)
    if (!(value > 0.0f)) fail(ErrorCategory::usage, "--std values must be > 0, got '" + flags.std + "'");
}

}  // namespace ipj::cli
