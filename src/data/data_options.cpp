// DataOptions: parsing of --resize, validation, JSON round trip and merging with recorded options.
#include "ipj/data/data_options.hpp"

#include <cmath>

#include "ipj/core/error.hpp"

namespace ipj::data {

ImageSize parse_image_size(const std::string& text, const std::string& flag) {
  const auto comma = text.find(',');
  ImageSize size;
  try {
    if (comma == std::string::npos) throw std::invalid_argument("no comma");
    std::size_t used_height = 0, used_width = 0;
    size.height = std::stoi(text.substr(0, comma), &used_height);
    size.width = std::stoi(text.substr(comma + 1), &used_width);
    if (used_height != comma || used_width != text.size() - comma - 1) throw std::invalid_argument("junk");
  } catch (const std::exception&) {
    fail(ErrorCategory::usage,
         flag + " '" + text + "': expected HEIGHT,WIDTH in pixels, e.g. " + flag + " 28,28");
  }
  if (size.height < 1 || size.width < 1 || size.height > 16384 || size.width > 16384)
    fail(ErrorCategory::usage, flag + " '" + text + "': height and width must be in 1..16384");
  return size;
}

void validate(const DataOptions& options) {
  if (options.channels != 0 && options.channels != 1 && options.channels != 3)
    fail(ErrorCategory::usage, "--channels must be 1 or 3, got " + std::to_string(options.channels));
  if (options.resize.height < 0 || options.resize.width < 0 ||
      (options.resize.height == 0) != (options.resize.width == 0))
    fail(ErrorCategory::usage, "--resize needs a positive height and width");
  if (options.mean.size() != options.std.size())
    fail(ErrorCategory::usage, "--mean and --std need the same number of values (one per channel), got " +
                                   std::to_string(options.mean.size()) + " and " +
                                   std::to_string(options.std.size()));
  for (const float value : options.std) {
    if (!(value > 0.0f) || !std::isfinite(value))
      fail(ErrorCategory::usage, "--std values must be positive numbers, got " + std::to_string(value));
  }
  for (const float value : options.mean) {
    if (!std::isfinite(value)) fail(ErrorCategory::usage, "--mean values must be finite numbers");
  }
  if (options.image_cache_mb < 0) fail(ErrorCategory::usage, "--image-cache-mb must be >= 0 (0 = no cache)");
  if (options.decode_threads < 0 || options.decode_threads > 256)
    fail(ErrorCategory::usage, "--decode-threads must be in 0..256 (0 = one per core)");
}

Json to_json(const DataOptions& options) {
  return Json{{"resize", options.resize.is_set() ? Json::array({options.resize.height, options.resize.width})
                                                 : Json(nullptr)},
              {"channels", options.channels},
              {"mean", options.mean},
              {"std", options.std},
              {"skip_bad_images", options.skip_bad_images}};
}

DataOptions data_options_from_json(const Json& json) {
  DataOptions options;
  if (!json.is_object()) return options;
  if (json.contains("resize") && json["resize"].is_array() && json["resize"].size() == 2)
    options.resize = ImageSize{json["resize"][0].get<int>(), json["resize"][1].get<int>()};
  if (json.contains("channels")) options.channels = json["channels"].get<int>();
  if (json.contains("mean")) options.mean = json["mean"].get<std::vector<float>>();
  if (json.contains("std")) options.std = json["std"].get<std::vector<float>>();
  if (json.contains("skip_bad_images")) options.skip_bad_images = json["skip_bad_images"].get<bool>();
  return options;
}

DataOptions merge_data_options(const DataOptions& recorded, const DataOptions& given) {
  DataOptions merged = given;
  if (!merged.resize.is_set()) merged.resize = recorded.resize;
  if (merged.channels == 0) merged.channels = recorded.channels;
  if (merged.mean.empty() && merged.std.empty()) {
    merged.mean = recorded.mean;
    merged.std = recorded.std;
  }
  merged.skip_bad_images = given.skip_bad_images || recorded.skip_bad_images;
  return merged;
}

}  // namespace ipj::data
