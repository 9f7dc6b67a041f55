// Repository scanning and config.json validation.
#include "ipj/serve/model_repository.hpp"

#include <algorithm>
#include <filesystem>

#include "ipj/core/error.hpp"

namespace ipj::serve {
namespace fs = std::filesystem;
namespace {

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  fail(ErrorCategory::invalid_input, "'" + path + "': " + what);
}

TensorSpec parse_tensor(const Json& entry, const std::string& path, const std::string& key) {
  if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string())
    bad(path, key + ": each entry needs a \"name\" string");
  TensorSpec spec;
  spec.name = entry["name"].get<std::string>();
  spec.datatype = entry.value("datatype", std::string("FP32"));
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
  if (config.contains("name") && config["name"] != name)
    bad(path, "\"name\" is '" + config["name"].get<std::string>() + "' but the folder is '" + name + "'");
  const Json& inputs = config.contains("inputs") ? config["inputs"] : config.value("input", Json());
  const Json& outputs = config.contains("outputs") ? config["outputs"] : config.value("output", Json());
  if (!inputs.is_array() || inputs.size() != 1) bad(path, "\"inputs\" must list exactly one input tensor");
  if (!outputs.is_array() || outputs.size() != 1)
    bad(path, "\"outputs\" must list exactly one output tensor");
  model.input = parse_tensor(inputs[0], path, "inputs");
  model.output = parse_tensor(outputs[0], path, "outputs");
  BatcherOptions& batching = model.batching;
  batching.max_batch_size = config.value("max_batch_size", std::int64_t{0});
  if (batching.max_batch_size < 0) bad(path, "\"max_batch_size\" must be >= 0");
  if (batching.max_batch_size > 0 && (model.input.shape[0] != -1 || model.output.shape[0] != -1))
    bad(path, "with max_batch_size > 0 the first dim of inputs and outputs is the batch: give it as -1");
  if (config.contains("dynamic_batching")) {
    const Json& dynamic = config["dynamic_batching"];
    if (!dynamic.is_object()) bad(path, "\"dynamic_batching\" must be an object");
    const Json& preferred = dynamic.contains("preferred_batch_sizes")
                                ? dynamic["preferred_batch_sizes"]
                                : dynamic.value("preferred_batch_size", Json::array());
    for (const Json& size : preferred) {
      if (!size.is_number_integer() || size.get<std::int64_t>() < 1 ||
          size.get<std::int64_t>() > batching.max_batch_size)
        bad(path, "preferred batch sizes must be integers in [1, max_batch_size]");
      batching.preferred_batch_sizes.push_back(size.get<std::int64_t>());
    }
    batching.max_queue_delay_us =
        dynamic.value("max_queue_delay_us", dynamic.value("max_queue_delay_microseconds", std::int64_t{0}));
    if (batching.max_queue_delay_us < 0) bad(path, "\"max_queue_delay_us\" must be >= 0");
    const std::int64_t queue = dynamic.value("max_queue_size", std::int64_t{1024});
    if (queue < 0) bad(path, "\"max_queue_size\" must be >= 0");
    batching.max_queue_size = static_cast<std::size_t>(queue);
  } else {
    batching.max_queue_delay_us = 0;  // no dynamic batching: each request runs as it comes
  }
  batching.instances = config.value("instances", 1);
  if (config.contains("instance_group") && config["instance_group"].is_array() &&
      !config["instance_group"].empty())
    batching.instances = config["instance_group"][0].value("count", 1);
  if (batching.instances < 1 || batching.instances > 64) bad(path, "instances must be in [1, 64]");
  model.variant = config.value("variant", std::string("file"));
  if (config.contains("mean")) model.mean = config["mean"].get<std::vector<float>>();
  if (config.contains("std")) model.std = config["std"].get<std::vector<float>>();
  if (model.mean.size() != model.std.size()) bad(path, "\"mean\" and \"std\" need the same length");
  return model;
}

std::vector<ModelConfig> read_model_repository(const std::string& directory) {
  if (!fs::is_directory(directory))
    fail(ErrorCategory::io, "model repository '" + directory + "' is not a folder (--model-repo DIR)");
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
    Json config;
    try {
      config = read_json_file(config_path.string());
    } catch (const Json::exception& error) {
      bad(config_path.string(), std::string("not valid JSON: ") + error.what());
    }
    ModelConfig model = parse_model_config(config, folder.filename().string(), config_path.string());
    model.directory = folder.string();
    std::vector<long long> versions;
    for (const auto& entry : fs::directory_iterator(folder)) {
      const std::string name = entry.path().filename().string();
      if (entry.is_directory() && !name.empty() && std::all_of(name.begin(), name.end(), ::isdigit) &&
          fs::exists(entry.path() / "model.pt"))
        versions.push_back(std::stoll(name));
    }
    if (versions.empty())
      fail(ErrorCategory::invalid_input,
           "'" + folder.string() + "' has no version folder with model.pt (e.g. 1/model.pt)");
    std::sort(versions.begin(), versions.end());
    for (long long version : versions)
      model.versions.push_back(std::to_string(version));
    models.push_back(std::move(model));
  }
  if (models.empty())
    fail(ErrorCategory::invalid_input, "model repository '" + directory + "' holds no model folders");
  return models;
}

}  // namespace ipj::serve
