// Model file detection and loading for quantization, pruning and inference.
#include "ipj/quant/source_model.hpp"

#include <torch/script.h>
#include <torch/serialize.h>

#include <filesystem>
#include <memory>

#include "ipj/core/checked_file.hpp"
#include "ipj/core/error.hpp"
#include "ipj/data/data_options.hpp"
#include "ipj/data/dataset.hpp"
#include "ipj/models/catalog.hpp"
#include "ipj/quant/graph_builders.hpp"
#include "ipj/quant/graph_file.hpp"
#include "ipj/quant/program_file.hpp"
#include "ipj/train/checkpoint.hpp"
#include "ipj/train/model_setup.hpp"

namespace ipj::quant {
namespace {

SourceModel from_checkpoint(const std::string& path) {
  const train::TrainedModel trained = train::load_trained_model(path);
  SourceModel source;
  const Json& info = trained.state.model_info;
  const std::string name = info.is_object() ? info.value("name", std::string()) : std::string();
  if (models::has_layer_program(name))
    source.program = extract_program(*trained.model, info);
  else
    source.graph = extract_graph(*trained.model, info);
  source.data_dir = trained.state.config.value("data", std::string(data::kDefaultDataDirectory));
  source.data_options =
      data::data_options_from_json(trained.state.config.value("data_options", Json::object()));
  source.trained_data = train::trained_data_record(info, trained.state.config, trained.path);
  source.path = trained.path;
  return source;
}

// A file that `ipj train` wrote (OUT/model.pt) brings its input shape and normalisation; flags win.
SourceModel from_torchscript(const std::string& path, const ImportOptions& given) {
  auto module = std::make_shared<torch::jit::Module>();
  torch::jit::ExtraFilesMap extra_files{{train::kTorchScriptInfoName, ""}};
  load_file_checked(path, "TorchScript file",
                    [&] { *module = torch::jit::load(path, c10::nullopt, extra_files); });
  ImportOptions import = given;
  train::fill_inputs_from_trained_info(extra_files[train::kTorchScriptInfoName], path, import.input_shape,
                                       import.mean, import.std);
  SourceModel source;
  source.trained_data = train::trained_data_record(extra_files[train::kTorchScriptInfoName], path);
  if (source.trained_data.known()) {  // an `ipj train` OUT/model.pt: its data is the default
    source.data_dir = source.trained_data.directory;
    source.data_options = source.trained_data.options;
  }
  source.graph = import_torchscript(*module, path, import);
  source.path = path;
  source.import_check = [module, import, graph = *source.graph](const torch::Tensor& pixels) {
    return import_difference(*module, graph, import, pixels);
  };
  return source;
}

}  // namespace

std::string model_file_format_name(ModelFileFormat format) {
  switch (format) {
    case ModelFileFormat::checkpoint:
      return "ipj-checkpoint";
    case ModelFileFormat::program:
      return "ipj-program";
    case ModelFileFormat::graph:
      return "ipj-graph";
    case ModelFileFormat::int8:
      return "ipj-int8";
    case ModelFileFormat::int8_graph:
      return "ipj-int8-graph";
    case ModelFileFormat::torchscript:
      return "torchscript";
  }
  return "unknown";
}

ModelFileFormat detect_model_file(const std::string& path) {
  std::error_code error;  // error_code forms: a symbolic-link loop is an error message, not an exception
  if (!std::filesystem::exists(path, error))
    fail(ErrorCategory::io, "no model file at '" + path + "'" + (error ? ": " + error.message() : ""));
  if (std::filesystem::is_directory(path, error)) {
    if (std::filesystem::exists(std::filesystem::path(path) / train::kCheckpointFileName, error))
      return ModelFileFormat::checkpoint;
    fail(ErrorCategory::invalid_input, "'" + path + "' is a folder without checkpoint.pt");
  }
  verify_zip_archive(path);  // a damaged ipj file is refused here, before LibTorch reads it
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path);
  } catch (const std::exception& failure) {
    const std::string message = failure.what();
    fail(ErrorCategory::invalid_input,
         "'" + path + "' is neither an ipj model nor a TorchScript file (torch.jit.save): " +
             message.substr(0, message.find('\n')));
  }
  c10::IValue marker;
  if (archive.try_read("ipj_int8_format", marker)) return ModelFileFormat::int8;
  if (archive.try_read("ipj_int8_graph_format", marker)) return ModelFileFormat::int8_graph;
  if (archive.try_read("ipj_program_format", marker)) return ModelFileFormat::program;
  if (archive.try_read("ipj_graph_format", marker)) return ModelFileFormat::graph;
  if (archive.try_read("ipj_checkpoint_format", marker)) return ModelFileFormat::checkpoint;
  return ModelFileFormat::torchscript;
}

SourceModel load_source_model(const std::string& path, const ImportOptions& import) {
  const ModelFileFormat format = detect_model_file(path);
  SourceModel source;
  switch (format) {
    case ModelFileFormat::checkpoint:
      source = from_checkpoint(path);
      break;
    case ModelFileFormat::program: {
      ProgramFile file = load_program(path);
      source.program = std::move(file.program);
      source.data_dir = file.extra.value("data_dir", std::string());
      source.data_options = data::data_options_from_json(file.extra.value("data_options", Json::object()));
      source.trained_data =
          data::data_record_from_json(file.extra.value("data_record", Json()), "'" + path + "'");
      source.path = path;
      break;
    }
    case ModelFileFormat::graph: {
      GraphFile file = load_graph(path);
      source.graph = std::move(file.graph);
      source.data_dir = file.extra.value("data_dir", std::string());
      source.data_options = data::data_options_from_json(file.extra.value("data_options", Json::object()));
      source.trained_data =
          data::data_record_from_json(file.extra.value("data_record", Json()), "'" + path + "'");
      source.path = path;
      break;
    }
    case ModelFileFormat::int8:
    case ModelFileFormat::int8_graph:
      fail(ErrorCategory::unsupported,
           "'" + path + "' is already an int8 model; quantize or prune the float model it came from");
    case ModelFileFormat::torchscript:
      source = from_torchscript(path, import);
      break;
  }
  source.format = format;
  return source;
}

SourceData source_data(const SourceModel& source, const std::string& given_dir,
                       const data::DataOptions& given) {
  SourceData result;
  result.directory = !given_dir.empty()         ? given_dir
                     : !source.data_dir.empty() ? source.data_dir
                                                : std::string(data::kDefaultDataDirectory);
  // The model's recorded --channels/--resize apply to other data too: they make its images fit the model.
  result.options = data::merge_data_options(source.data_options, given);
  return result;
}

void add_data_warning(const SourceModel& source, const std::string& given_dir, const data::Dataset& dataset,
                      Json& warnings) {
  if (given_dir.empty()) return;
  const std::string mismatch = data::describe_data_mismatch(source.trained_data, dataset);
  if (!mismatch.empty()) warnings.push_back(mismatch);
}

void check_data_classes(int model_classes, const data::Dataset& dataset, const std::string& path) {
  if (model_classes <= 0 || dataset.num_classes <= model_classes) return;
  fail(ErrorCategory::invalid_input,
       "data set '" + dataset.directory + "' has " + std::to_string(dataset.num_classes) + " classes but '" +
           path + "' gives " + std::to_string(model_classes) +
           " outputs: use the data it was trained on (leave --data out for an ipj-trained model) or a model "
           "with one output per class");
}

void check_data_shape(const std::vector<std::int64_t>& shape, const data::ImageSet& images,
                      const std::string& data_dir) {
  std::string shape_text;
  for (const std::int64_t size : shape)
    shape_text += (shape_text.empty() ? "" : "x") + std::to_string(size);
  const bool same = shape.size() == 3
                        ? shape[0] == images.channels && shape[1] == images.height && shape[2] == images.width
                        : shape.size() == 1 && shape[0] == images.image_bytes();
  if (!same)
    fail(ErrorCategory::invalid_input,
         "data set '" + data_dir + "' has images of another shape (" + std::to_string(images.channels) + "x" +
             std::to_string(images.height) + "x" + std::to_string(images.width) +
             ") than the model's input (" + shape_text +
             "); check --input-shape or --data, or pass --channels/--resize to match");
}

double check_import(const SourceModel& source, const torch::Tensor& pixels) {
  if (!source.import_check) return 0.0;
  const double difference = source.import_check(pixels);
  if (!(difference <= 1e-3))
    fail(ErrorCategory::unsupported,
         "'" + source.path + "': ipj's imported graph differs from the TorchScript module by " +
             std::to_string(difference) +
             " (relative) on real inputs; the model does something the importer does not model "
             "(e.g. depends on training mode or input values). Check --input-shape and --mean/--std");
  return difference;
}

}  // namespace ipj::quant
