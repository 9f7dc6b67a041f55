// What a model file records about the data it was trained on (model_info's "data": the ipj.json extra file
// of `ipj train`'s OUT/model.pt and the checkpoint), so that bench/quantize/prune/distill read the same data
// without --data, and warn when given data of another class count or channel count. LibTorch-free.
#pragma once

#include <string>
#include <vector>

#include "ipj/core/json_io.hpp"
#include "ipj/data/data_options.hpp"
#include "ipj/data/dataset.hpp"

namespace ipj::data {

struct DataRecord {
  std::string directory;             // absolute path of the data folder ("" = nothing recorded)
  std::string format;                // idx | cifar10-binary | image-folder
  DataOptions options;               // as applied: channels and resize resolved, the normalisation mean/std
  int channels = 0;                  // of the images the model saw (0 = unknown)
  int num_classes = 0;               // 0 = unknown
  std::vector<std::string> classes;  // image folders: class names in label order
  bool known() const { return !directory.empty(); }
};

// The record of a loaded data set (its directory made absolute).
DataRecord data_record(const Dataset& dataset);
// {"path", "format", "channels", "resize", "mean", "std", "skip_bad_images", "num_classes", "classes"}.
Json to_json(const DataRecord& record);
// Reads it back (null or absent: an unknown record). Throws ipj::Error(invalid_input) naming `where` when the
// object is damaged (wrong types).
DataRecord data_record_from_json(const Json& json, const std::string& where);

// "" when `given` has the class count and channel count the model was trained with (or the record does not
// say); else one sentence naming both data sets and what differs, e.g. for a warning.
std::string describe_data_mismatch(const DataRecord& trained, const Dataset& given);

}  // namespace ipj::data
