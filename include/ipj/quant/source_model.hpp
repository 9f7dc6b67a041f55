// What `ipj quantize`, `ipj prune` and the inference loader start from: the file format of a model path, and
// the model as a LayerProgram (ipj's mlp/cnn and their program files) or as graph IR (ipj's ResNets, graph
// files, and any TorchScript file, imported).
#pragma once

#include <functional>
#include <optional>
#include <string>

#include <torch/types.h>

#include "ipj/data/data_options.hpp"
#include "ipj/data/data_record.hpp"
#include "ipj/data/dataset.hpp"
#include "ipj/quant/graph.hpp"
#include "ipj/quant/layer_program.hpp"
#include "ipj/quant/torchscript_import.hpp"

namespace ipj::quant {

enum class ModelFileFormat { checkpoint, program, graph, int8, int8_graph, torchscript };
std::string model_file_format_name(ModelFileFormat format);  // "ipj-checkpoint", ..., "torchscript"

// Detects the format from the archive's marker (a folder with checkpoint.pt is a checkpoint; an archive
// without ipj markers is taken as TorchScript). Throws ipj::Error: io (missing), invalid_input (not an
// archive, folder without checkpoint.pt).
ModelFileFormat detect_model_file(const std::string& path);

struct SourceModel {
  std::optional<LayerProgram> program;  // mlp, cnn and their program files
  std::optional<Graph> graph;           // everything else
  ModelFileFormat format = ModelFileFormat::checkpoint;
  std::string data_dir;  // the data set the model was trained on ("" when unknown)
  data::DataOptions
      data_options;  // how that data was read (--resize, --channels, ...); defaults when unknown
  // What the file records about its training data (a checkpoint's or an ipj.json's "data", a program/graph
  // file's "data_record"); unknown for other files.
  data::DataRecord trained_data;
  std::string path;  // the file loaded (checkpoint.pt for a run folder)
  // TorchScript only: the importer's self-check, import_difference on these pixels ([B, C, H, W] in [0, 1]).
  std::function<double(const torch::Tensor&)> import_check;
};

// `import` gives the input shape and normalisation of TorchScript files (ignored for ipj's own files).
// Throws ipj::Error(unsupported) for int8 files (already quantized) and for unsupported operators.
SourceModel load_source_model(const std::string& path, const ImportOptions& import);

// The data set of `ipj quantize/prune`: `given_dir` (--data) if set, else the one the model was trained on,
// else Fashion-MNIST; `given` (--resize, --channels, ...) on top of the model's recorded options. `warnings`
// gets one line when --data differs from the model's own data in class or channel count.
struct SourceData {
  std::string directory;
  data::DataOptions options;
};
SourceData source_data(const SourceModel& source, const std::string& given_dir,
                       const data::DataOptions& given);
void add_data_warning(const SourceModel& source, const std::string& given_dir, const data::Dataset& dataset,
                      Json& warnings);
// Throws ipj::Error(invalid_input) when the data has more classes than the model has outputs
// (`model_classes`, 0 = unknown): training on it would index past the logits, and its accuracy means nothing.
void check_data_classes(int model_classes, const data::Dataset& dataset, const std::string& path);

// Throws ipj::Error(invalid_input) naming `data_dir` when the images are not of the model's input shape
// ([C, H, W], or a flat size C*H*W).
void check_data_shape(const std::vector<std::int64_t>& shape, const data::ImageSet& images,
                      const std::string& data_dir);

// Fails with ipj::Error(unsupported) when the TorchScript import differs from the module by more than 1e-3
// (relative) on `pixels`; a no-op for ipj's own files. Returns the difference (0 for ipj files).
double check_import(const SourceModel& source, const torch::Tensor& pixels);

}  // namespace ipj::quant
