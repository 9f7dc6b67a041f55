// Output helpers shared by subcommands.
#include "cli_support.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <limits>
#include <sstream>
#include <system_error>
#include <type_traits>
#include <vector>

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
      ->check(CLI::Validator(
          [](std::string& text) {
            return text == "1" || text == "3" ? std::string()
                                              : "'" + text + "' is not a channel count: give one in {1, 3}";
          },
          "{1, 3}"));
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
      ->check(non_negative_integer(std::int64_t{1} << 30))
      ->capture_default_str();
  command
      .add_option("--decode-threads", flags.options.decode_threads,
                  "Image folders: decoding threads (0 = one per core)")
      ->check(non_negative_integer(256))
      ->capture_default_str();
}

data::DataOptions data_options(const DataFlags& flags) {
  data::DataOptions options = flags.options;
  if (!flags.resize.empty()) options.resize = data::parse_image_size(flags.resize, "--resize");
  if (!flags.mean.empty()) options.mean = parse_floats(flags.mean, "--mean");
  if (!flags.std.empty()) options.std = parse_floats(flags.std, "--std");
  data::validate(options);
  return options;
}

namespace {
std::vector<std::string>& reserved_run_folders() {
  static std::vector<std::string> folders;
  return folders;
}
}  // namespace

std::string default_run_folder(const std::string& name) {
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
  std::error_code error;
  std::filesystem::create_directories("runs", error);
  const std::string base = "runs/" + name + "-" + stamp;
  // mkdir is the reservation: of two runs started in the same second, the second gets "-2"
  for (int suffix = 1; suffix <= 1000; ++suffix) {
    const std::string folder = suffix == 1 ? base : base + "-" + std::to_string(suffix);
    if (::mkdir(folder.c_str(), 0777) == 0) {
      reserved_run_folders().push_back(folder);
      return folder;
    }
    if (errno != EEXIST)
      fail(ErrorCategory::io, "cannot create the run folder '" + folder + "': " + std::strerror(errno) +
                                  " (in " + std::filesystem::current_path(error).string() +
                                  "); run from a writable folder or pass --out DIR");
  }
  fail(ErrorCategory::io, "runs/ holds 1000 folders named '" + base + "*' already; pass --out DIR");
}

void remove_reserved_run_folders_left_empty() {
  for (const std::string& folder : reserved_run_folders()) {
    std::error_code error;
    if (std::filesystem::is_empty(folder, error) && !error) std::filesystem::remove(folder, error);
  }
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

namespace {

// "[0, 4096]" / "(0, 100]".
std::string range_text(const std::string& min, const std::string& max, bool open_min) {
  return (open_min ? "(" : "[") + min + ", " + max + "]";
}

// Whole-number text: an optional sign, then digits only. Overflow of `Integer` is out of range.
template <typename Integer>
bool parse_whole_number(const std::string& text, Integer& value, bool& overflow) {
  overflow = false;
  std::size_t start = text.empty() || (text[0] != '+' && text[0] != '-') ? 0 : 1;
  if (start == text.size() || text.find_first_not_of("0123456789", start) != std::string::npos) return false;
  if (text[0] == '-' && std::is_unsigned<Integer>::value) {  // "-0" is still 0; any other is below range
    overflow = text.find_first_not_of('0', 1) != std::string::npos;
    value = 0;
    return true;
  }
  const char* first = text.c_str() + (text[0] == '+' ? 1 : 0);
  const auto [end, error] = std::from_chars(first, text.c_str() + text.size(), value);
  overflow = error == std::errc::result_out_of_range;
  return overflow || (error == std::errc() && end == text.c_str() + text.size());
}

template <typename Integer>
CLI::Validator whole_number_range(Integer min, Integer max) {
  const std::string range = range_text(std::to_string(min), std::to_string(max), false);
  return CLI::Validator(
      [min, max, range](std::string& text) -> std::string {
        Integer value = 0;
        bool overflow = false;
        if (!parse_whole_number(text, value, overflow))
          return "'" + text + "' is not a whole number: give one in " + range;
        if (overflow || value < min || value > max)
          return "'" + text + "' is out of range: give a whole number in " + range;
        return "";
      },
      range);
}

CLI::Validator number_range(double min, double max, bool open_min) {
  const std::string range = range_text(format_number("%g", min), format_number("%g", max), open_min);
  return CLI::Validator(
      [min, max, open_min, range](std::string& text) -> std::string {
        double value = 0.0;
        if (!CLI::detail::lexical_cast(text, value))
          return "'" + text + "' is not a number: give one in " + range;
        if (!std::isfinite(value) || value < min || value > max || (open_min && value <= min))
          return "'" + text + "' is out of range: give a finite number in " + range;
        return "";
      },
      range);
}

}  // namespace

CLI::Validator integer_range(std::int64_t min, std::int64_t max) {
  return whole_number_range<std::int64_t>(min, max);
}
CLI::Validator non_negative_integer(std::int64_t max) {
  return integer_range(0, max);
}
CLI::Validator positive_integer(std::int64_t max) {
  return integer_range(1, max);
}
CLI::Validator seed_value() {
  return whole_number_range<std::uint64_t>(0, std::numeric_limits<std::uint64_t>::max());
}
CLI::Validator finite_range(double min, double max) {
  return number_range(min, max, false);
}
CLI::Validator probability() {
  return finite_range(0.0, 1.0);
}
CLI::Validator positive_number(double max) {
  return number_range(0.0, max, true);
}
CLI::Validator range_above(double min, double max) {
  return number_range(min, max, true);
}

void print_warnings(const Json& report) {
  if (!report.is_object() || !report.contains("warnings") || !report["warnings"].is_array()) return;
  for (const Json& warning : report["warnings"])
    if (warning.is_string()) std::cerr << "ipj: warning: " << warning.get<std::string>() << "\n";
}

void print_json(const Json& value) {
  std::cout << value.dump() << std::endl;
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

std::vector<std::int64_t> parse_integer_list(const std::string& text, const std::string& flag,
                                             std::int64_t min, std::int64_t max) {
  const CLI::Validator check = integer_range(min, max);
  std::vector<std::int64_t> values;
  for (std::string part : split_commas(text)) {
    const std::string problem = check(part);
    if (!problem.empty()) fail(ErrorCategory::usage, flag + " " + text + ": " + problem);
    values.push_back(std::stoll(part));
  }
  if (values.empty())
    fail(ErrorCategory::usage, flag + " is empty: give whole numbers in [" + std::to_string(min) + ", " +
                                   std::to_string(max) + "] separated by commas");
  return values;
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
  const auto count = static_cast<std::int64_t>(mean.size());
  if (count > 1 && !shape.empty() && count != shape.front())
    fail(ErrorCategory::usage, "--mean/--std give " + std::to_string(count) + " values for --input-shape " +
                                   flags.input_shape + ": give one value, or one per channel (" +
                                   std::to_string(shape.front()) +
                                   ") of a [C, H, W] shape (per feature of a "
                                   "flat one)");
}

}  // namespace ipj::cli
