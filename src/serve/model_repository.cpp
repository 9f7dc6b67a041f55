// Repository scanning and config.json validation. Every file of the repository is read only when it is a
// regular file inside the repository (links are followed, but not out of it); config.json is size- and
// depth-bounded (kConfigFileLimits) before it is parsed.
#include "ipj/serve/model_repository.hpp"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <filesystem>

#include "ipj/core/atomic_file.hpp"
#include "ipj/core/error.hpp"
#include "ipj/quant/quantized_program.hpp"

namespace ipj::serve {
namespace fs = std::filesystem;
namespace {

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  fail(ErrorCategory::invalid_input, "'" + path + "': " + what);
}

std::string shown(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  return text.size() > 40 ? text.substr(0, 40) + "..." : text;
}

// Typed reads of optional config keys: a value of the wrong type names the file and the key.
std::int64_t integer_value(const Json& object, const std::string& key, std::int64_t fallback,
                           const std::string& path) {
  if (!object.contains(key)) return fallback;
  const Json& value = object[key];
  if (!value.is_number_integer() || (value.is_number_unsigned() && value.get<std::uint64_t>() > INT64_MAX))
    bad(path, "\"" + key + "\" must be an integer, got " + shown(value));
  return value.get<std::int64_t>();
}

bool bool_value(const Json& object, const std::string& key, bool fallback, const std::string& path) {
  if (!object.contains(key)) return fallback;
  if (!object[key].is_boolean())
    bad(path, "\"" + key + "\" must be true or false, got " + shown(object[key]));
  return object[key].get<bool>();
}

std::string string_value(const Json& object, const std::string& key, const std::string& fallback,
                         const std::string& path) {
  if (!object.contains(key)) return fallback;
  if (!object[key].is_string()) bad(path, "\"" + key + "\" must be a string, got " + shown(object[key]));
  return object[key].get<std::string>();
}

std::vector<float> number_list(const Json& object, const std::string& key, const std::string& path) {
  if (!object.contains(key)) return {};
  const Json& value = object[key];
  if (!value.is_array()) bad(path, "\"" + key + "\" must be a list of numbers, got " + shown(value));
  std::vector<float> numbers;
  for (const Json& number : value) {
    if (!number.is_number()) bad(path, "\"" + key + "\" must be a list of numbers, got " + shown(number));
    numbers.push_back(number.get<float>());
  }
  return numbers;
}

TensorSpec parse_tensor(const Json& entry, const std::string& path, const std::string& key) {
  if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string())
    bad(path, key + ": each entry needs a \"name\" string");
  TensorSpec spec;
  spec.name = entry["name"].get<std::string>();
  spec.datatype = string_value(entry, "datatype", "FP32", path);
  if (spec.datatype != "FP32")
    bad(path,
        key + " '" + spec.name + "': datatype " + spec.datatype + " is not served; ipj models use FP32");
  const Json& shape = entry.contains("shape") ? entry["shape"] : entry.value("dims", Json());
  if (!shape.is_array() || shape.empty())
    bad(path, key + " '" + spec.name + "': \"shape\" must be a non-empty list");
  for (const Json& dim : shape) {
    if (!dim.is_number_integer() || (dim.get<std::int64_t>() < 1 && dim.get<std::int64_t>() != -1))
      bad(path, key + " '" + spec.name + "': shape entries are positive integers or -1");
    spec.shape.push_back(dim.get<std::int64_t>());
  }
  return spec;
}

// Throws Error(invalid_input) naming `path` when it (following symbolic links) lies outside `root` (the
// repository, canonical), Error(io) when it cannot be resolved (a dangling link, a loop, no permission).
void require_inside_repository(const fs::path& path, const fs::path& root) {
  std::error_code error;
  const fs::path target = fs::canonical(path, error);
  if (error)
    fail(ErrorCategory::io, "cannot resolve '" + path.string() +
                                "' in the model repository: " + error.message() + "; fix or remove it");
  if (std::mismatch(root.begin(), root.end(), target.begin(), target.end()).first != root.end())
    fail(ErrorCategory::invalid_input,
         "'" + path.string() + "' resolves to '" + target.string() + "', outside the model repository '" +
             root.string() +
             "': ipj serve reads only files inside --model-repo; copy the file into the repository instead "
             "of linking to it");
}

// A regular file inside the repository (require_regular_file: not a device such as /dev/zero, not a FIFO).
void require_repository_file(const fs::path& path, const fs::path& root) {
  require_regular_file(path.string());
  require_inside_repository(path, root);
}

}  // namespace

std::string ModelConfig::model_path(const std::string& version) const {
  return (fs::path(directory) / version / "model.pt").string();
}

std::vector<std::int64_t> ModelConfig::sample_shape() const {
  if (batching.max_batch_size > 0) return {input.shape.begin() + 1, input.shape.end()};
  return input.shape;
}

ModelConfig parse_model_config(const Json& config, const std::string& name, const std::string& path) {
  if (!config.is_object()) bad(path, "must hold a JSON object");
  ModelConfig model;
  model.name = name;
  model.raw = config;
  if (config.contains("name") && string_value(config, "name", name, path) != name)
    bad(path, "\"name\" is '" + config["name"].get<std::string>() + "' but the folder is '" + name + "'");
  const Json& inputs = config.contains("inputs") ? config["inputs"] : config.value("input", Json());
  const Json& outputs = config.contains("outputs") ? config["outputs"] : config.value("output", Json());
  if (!inputs.is_array() || inputs.size() != 1) bad(path, "\"inputs\" must list exactly one input tensor");
  if (!outputs.is_array() || outputs.size() != 1)
    bad(path, "\"outputs\" must list exactly one output tensor");
  model.input = parse_tensor(inputs[0], path, "inputs");
  model.output = parse_tensor(outputs[0], path, "outputs");
  BatcherOptions& batching = model.batching;
  batching.max_batch_size = integer_value(config, "max_batch_size", 0, path);
  if (batching.max_batch_size < 0) bad(path, "\"max_batch_size\" must be >= 0");
  if (batching.max_batch_size > 0 && (model.input.shape[0] != -1 || model.output.shape[0] != -1))
    bad(path, "with max_batch_size > 0 the first dim of inputs and outputs is the batch: give it as -1");
  if (config.contains("dynamic_batching")) {
    const Json& dynamic = config["dynamic_batching"];
    if (!dynamic.is_object()) bad(path, "\"dynamic_batching\" must be an object");
    const Json& preferred = dynamic.contains("preferred_batch_sizes")
                                ? dynamic["preferred_batch_sizes"]
                                : dynamic.value("preferred_batch_size", Json::array());
    if (!preferred.is_array()) bad(path, "preferred batch sizes must be a list of integers");
    for (const Json& size : preferred) {
      if (!size.is_number_integer() || size.get<std::int64_t>() < 1 ||
          size.get<std::int64_t>() > batching.max_batch_size)
        bad(path, "preferred batch sizes must be integers in [1, max_batch_size]");
      batching.preferred_batch_sizes.push_back(size.get<std::int64_t>());
    }
    batching.max_queue_delay_us = integer_value(
        dynamic, "max_queue_delay_us", integer_value(dynamic, "max_queue_delay_microseconds", 0, path), path);
    if (batching.max_queue_delay_us < 0) bad(path, "\"max_queue_delay_us\" must be >= 0");
    const std::int64_t queue = integer_value(dynamic, "max_queue_size", 1024, path);
    if (queue < 0) bad(path, "\"max_queue_size\" must be >= 0");
    batching.max_queue_size = static_cast<std::size_t>(queue);
  } else {
    batching.max_queue_delay_us = 0;  // no dynamic batching: each request runs as it comes
  }
  std::int64_t instances = integer_value(config, "instances", 1, path);
  if (config.contains("instance_group") && config["instance_group"].is_array() &&
      !config["instance_group"].empty()) {
    if (!config["instance_group"][0].is_object()) bad(path, "\"instance_group\" entries must be objects");
    instances = integer_value(config["instance_group"][0], "count", 1, path);
  }
  if (instances < 1 || instances > 64) bad(path, "instances must be in [1, 64]");
  batching.instances = static_cast<int>(instances);
  model.variant = string_value(config, "variant", "file", path);
  model.engine = string_value(config, "engine", "auto", path);
  try {
    model.prefer =
        parse_choice<infer::Preference>(string_value(config, "prefer", "joules", path), "\"prefer\"");
  } catch (const Error& error) {
    bad(path, error.what());
  }
  const std::vector<std::string> engines = quant::available_quantized_engines();
  if (model.engine != "auto" && std::find(engines.begin(), engines.end(), model.engine) == engines.end()) {
    std::string names = "\"auto\"";
    for (const std::string& engine : engines)
      names += ", \"" + engine + "\"";
    bad(path, "\"engine\" '" + model.engine + "' is not a quantized engine of this build: use " + names);
  }
  model.mean = number_list(config, "mean", path);
  model.std = number_list(config, "std", path);
  model.energy_in_response = bool_value(config, "energy_in_response", true, path);
  if (model.mean.size() != model.std.size()) bad(path, "\"mean\" and \"std\" need the same length");
  for (const float value :
       model.std)  // the CLI's --std rule: a division by 0 or a sign flip is no model's input
    if (!(value > 0.0f) || !std::isfinite(value)) bad(path, "\"std\" values must be finite and > 0");
  for (const float value : model.mean)
    if (!std::isfinite(value)) bad(path, "\"mean\" values must be finite");
  return model;
}

std::vector<ModelConfig> read_model_repository(const std::string& directory) {
  if (!fs::is_directory(directory))
    fail(ErrorCategory::io, "model repository '" + directory + "' is not a folder (--model-repo DIR)");
  std::error_code error;
  const fs::path root = fs::canonical(directory, error);
  if (error) fail(ErrorCategory::io, "model repository '" + directory + "': " + error.message());
  std::vector<ModelConfig> models;
  std::vector<fs::path> folders;
  for (const auto& entry : fs::directory_iterator(directory))
    if (entry.is_directory()) folders.push_back(entry.path());
  std::sort(folders.begin(), folders.end());
  for (const fs::path& folder : folders) {
    const fs::path config_path = folder / "config.json";
    if (!fs::exists(config_path))
      fail(ErrorCategory::invalid_input,
           "'" + folder.string() + "' has no config.json (see docs/SERVING.md)");
    require_repository_file(config_path, root);
    Json config;
    try {
      config = read_json_file(config_path.string(), kConfigFileLimits);
    } catch (const Json::exception& error) {
      bad(config_path.string(), std::string("not valid JSON: ") + error.what());
    }
    ModelConfig model = parse_model_config(config, folder.filename().string(), config_path.string());
    model.directory = folder.string();
    std::vector<std::int64_t> versions;
    for (const auto& entry : fs::directory_iterator(folder)) {
      const std::string name = entry.path().filename().string();
      if (!entry.is_directory() || name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit) ||
          !fs::exists(entry.path() / "model.pt"))
        continue;
      std::int64_t version = 0;
      const auto parsed = std::from_chars(name.data(), name.data() + name.size(), version);
      if (parsed.ec != std::errc() || version < 1)
        fail(ErrorCategory::invalid_input,
             "version folder '" + entry.path().string() +
                 "' is not a version number in [1, 2^63-1]; rename it (e.g. 1)");
      require_repository_file(entry.path() / "model.pt", root);
      versions.push_back(version);
    }
    if (versions.empty())
      fail(ErrorCategory::invalid_input,
           "'" + folder.string() + "' has no version folder with model.pt (e.g. 1/model.pt)");
    std::sort(versions.begin(), versions.end());
    for (const std::int64_t version : versions)
      model.versions.push_back(std::to_string(version));
    models.push_back(std::move(model));
  }
  if (models.empty())
    fail(ErrorCategory::invalid_input, "model repository '" + directory + "' holds no model folders");
  return models;
}

}  // namespace ipj::serve
