// The record of a model's training data (model_info "data") and the check of other data against it.
#include "ipj/data/data_record.hpp"

#include <filesystem>

#include "ipj/core/error.hpp"

namespace ipj::data {

DataRecord data_record(const Dataset& dataset) {
  DataRecord record;
  std::error_code error;
  const std::filesystem::path absolute =
      std::filesystem::absolute(dataset.directory, error).lexically_normal();
  record.directory = error ? dataset.directory : absolute.string();
  if (record.directory.size() > 1 && record.directory.back() == '/') record.directory.pop_back();
  record.format = dataset.format;
  record.options = dataset.options;
  record.options.mean = dataset.normalization.mean;
  record.options.std = dataset.normalization.std;
  record.channels = dataset.train.channels;
  record.num_classes = dataset.num_classes;
  record.classes = dataset.class_names;
  return record;
}

Json to_json(const DataRecord& record) {
  Json json = to_json(record.options);  // resize, channels, mean, std, skip_bad_images
  json["path"] = record.directory;
  json["format"] = record.format;
  json["channels"] = record.channels;
  json["num_classes"] = record.num_classes;
  json["classes"] = record.classes;
  return json;
}

DataRecord data_record_from_json(const Json& json, const std::string& where) {
  DataRecord record;
  if (json.is_null()) return record;
  try {
    if (!json.is_object()) throw std::invalid_argument("\"data\" is not an object");
    record.directory = json.at("path").get<std::string>();
    record.format = json.value("format", std::string());
    record.options = data_options_from_json(json);
    record.channels = json.value("channels", 0);
    record.num_classes = json.value("num_classes", 0);
    record.classes = json.value("classes", std::vector<std::string>{});
  } catch (const std::exception& problem) {
    fail(ErrorCategory::invalid_input, where + ": its record of the training data (\"data\") is damaged (" +
                                           problem.what() + "); give --data and the data flags, or retrain");
  }
  return record;
}

std::string describe_data_mismatch(const DataRecord& trained, const Dataset& given) {
  if (!trained.known()) return "";
  const bool classes_differ = trained.num_classes > 0 && trained.num_classes != given.num_classes;
  const bool channels_differ = trained.channels > 0 && trained.channels != given.test.channels;
  if (!classes_differ && !channels_differ) return "";
  auto describe = [](int classes, int channels) {
    return std::to_string(classes) + " classes, " + std::to_string(channels) + "-channel images";
  };
  return "the model was trained on '" + trained.directory + "' (" +
         describe(trained.num_classes, trained.channels) + ") but --data '" + given.directory + "' has " +
         describe(given.num_classes, given.test.channels) +
         (classes_differ ? ": its accuracy there means nothing unless the labels are the same"
                         : ": give --channels " + std::to_string(trained.channels)) +
         "; leave --data out to use the model's own data";
}

}  // namespace ipj::data
