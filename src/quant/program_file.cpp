// Serialisation of float LayerPrograms.
#include "ipj/quant/program_file.hpp"

#include <torch/serialize.h>

#include "archive_io.hpp"
#include "ipj/core/atomic_file.hpp"
#include "ipj/core/checked_file.hpp"
#include "ipj/core/error.hpp"
#include "ipj/quant/source_model.hpp"

namespace ipj::quant {

Json layer_metadata(const Layer& layer) {
  return {{"kind", layer_kind_name(layer.kind)},
          {"relu", layer.relu},
          {"stride", layer.stride},
          {"padding", layer.padding},
          {"pool", layer.pool}};
}

Layer layer_from_metadata(const Json& entry) {
  Layer layer;
  const std::string kind = entry.at("kind").get<std::string>();
  if (kind == "linear")
    layer.kind = LayerKind::linear;
  else if (kind == "conv2d")
    layer.kind = LayerKind::conv2d;
  else if (kind == "flatten")
    layer.kind = LayerKind::flatten;
  else if (kind == "max_pool2d")
    layer.kind = LayerKind::max_pool2d;
  else
    fail(ErrorCategory::invalid_input, "unknown layer kind '" + kind + "'");
  layer.relu = entry.at("relu").get<bool>();
  layer.stride = entry.at("stride").get<std::int64_t>();
  layer.padding = entry.at("padding").get<std::int64_t>();
  layer.pool = entry.at("pool").get<std::int64_t>();
  return layer;
}

void save_program(const std::string& path, const LayerProgram& program, const Json& extra) {
  Json meta = {{"model_name", program.model_name},
               {"input_shape", program.input_shape},
               {"num_classes", program.num_classes},
               {"input_padding", program.input_padding},
               {"input_pad_value", program.input_pad_value},
               {"layers", Json::array()},
               {"extra", extra}};
  torch::serialize::OutputArchive archive;
  archive.write("ipj_program_format", c10::IValue(static_cast<std::int64_t>(kProgramFormatVersion)));
  for (std::size_t index = 0; index < program.layers.size(); ++index) {
    const Layer& layer = program.layers[index];
    meta["layers"].push_back(layer_metadata(layer));
    if (layer.weight.defined()) {
      archive.write("layer" + std::to_string(index) + ".weight", layer.weight.detach().contiguous());
      archive.write("layer" + std::to_string(index) + ".bias", layer.bias.detach().contiguous());
    }
  }
  archive.write("meta_json", c10::IValue(meta.dump()));
  save_sealed_archive(archive, path);
}

bool is_program_file(const std::string& path) {
  try {
    return detect_model_file(path) == ModelFileFormat::program;
  } catch (const std::exception&) {  // any damage: "not this format"; its loader says why
    return false;
  }
}

ProgramFile load_program(const std::string& path) try {
  OpenedArchive opened = open_ipj_archive(path, "ipj_program_format", kProgramFormatVersion, "program file");
  torch::serialize::InputArchive& archive = opened.archive;
  const Json& meta = opened.meta;
  ProgramFile file;
  try {
    LayerProgram& program = file.program;
    program.model_name = meta.at("model_name").get<std::string>();
    program.input_shape = meta.at("input_shape").get<std::vector<std::int64_t>>();
    program.num_classes = meta.at("num_classes").get<int>();
    program.input_padding = meta.at("input_padding").get<std::int64_t>();
    program.input_pad_value = meta.at("input_pad_value").get<std::vector<float>>();
    file.extra = meta.value("extra", Json::object());
    const Json& layers = meta.at("layers");
    for (std::size_t index = 0; index < layers.size(); ++index) {
      Layer layer = layer_from_metadata(layers[index]);
      if (layer.kind == LayerKind::linear || layer.kind == LayerKind::conv2d) {
        torch::Tensor weight, bias;  // fresh tensors: reading into a defined one would alias it
        archive.read("layer" + std::to_string(index) + ".weight", weight);
        archive.read("layer" + std::to_string(index) + ".bias", bias);
        layer.weight = weight;
        layer.bias = bias;
      }
      program.layers.push_back(layer);
    }
  } catch (const Json::exception& error) {
    fail(ErrorCategory::invalid_input, "'" + path + "': damaged program metadata: " + error.what());
  } catch (const c10::Error& error) {
    fail(ErrorCategory::invalid_input, "'" + path + "': damaged program: " + error.what_without_backtrace());
  }
  return file;
} catch (...) {
  rethrow_as_load_error(path, "ipj program file");
}

}  // namespace ipj::quant
