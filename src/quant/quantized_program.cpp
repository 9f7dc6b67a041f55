// int8 conversion and execution through LibTorch's quantized ops: prepacking goes through the dispatcher
// (quantized::linear_prepack / conv2d_prepack), execution through the packed params' virtual apply methods.
#include "ipj/quant/quantized_program.hpp"

#include <torch/serialize.h>
#include <torch/torch.h>

#include <fstream>

#include "archive_io.hpp"
#include "ipj/core/atomic_file.hpp"
#include "ipj/core/checked_file.hpp"
#include "ipj/core/error.hpp"
#include "ipj/quant/program_file.hpp"
#include "ipj/quant/source_model.hpp"
#include "quantized_kernels.hpp"

namespace ipj::quant {
namespace {

std::string engine_name(at::QEngine engine) {
  switch (engine) {
    case at::QEngine::ONEDNN:
      return "onednn";
    case at::QEngine::QNNPACK:
      return "qnnpack";
    case at::QEngine::FBGEMM:
      return "fbgemm";
    default:
      return "none";
  }
}

}  // namespace

struct QuantizedProgram::Packed {
  std::vector<LinearPacked> linear;  // per layer index
  std::vector<ConvPacked> conv;
};

std::string quant_mode_name(QuantMode mode) {
  switch (mode) {
    case QuantMode::dynamic:
      return "dynamic";
    case QuantMode::static_ptq:
      return "static";
    case QuantMode::qat:
      return "qat";
  }
  return "unknown";
}

QuantMode parse_quant_mode(const std::string& name) {
  if (name == "dynamic") return QuantMode::dynamic;
  if (name == "static") return QuantMode::static_ptq;
  if (name == "qat") return QuantMode::qat;
  fail(ErrorCategory::usage, "unknown --mode '" + name + "': use dynamic, static or qat");
}

std::vector<std::string> available_quantized_engines() {
  std::vector<std::string> names;
  // The engines ipj names: builds with FBGEMM (the official LibTorch 2.x ones) also list QEngine::X86, which
  // engine_name calls "none" and use_quantized_engine cannot select.
  for (const at::QEngine engine : at::globalContext().supportedQEngines())
    if (engine != at::QEngine::NoQEngine && engine_name(engine) != "none")
      names.push_back(engine_name(engine));
  return names;
}

std::string select_quantized_engine(const std::string& requested) {
  const std::vector<std::string> available = available_quantized_engines();
  std::string chosen;
  if (requested == "auto") {
    for (const char* preferred : {"onednn", "fbgemm", "qnnpack"})
      if (chosen.empty() && std::find(available.begin(), available.end(), preferred) != available.end())
        chosen = preferred;
  } else if (std::find(available.begin(), available.end(), requested) != available.end()) {
    chosen = requested;
  }
  if (chosen.empty()) {
    std::string list;
    for (const auto& name : available)
      list += (list.empty() ? "" : ", ") + name;
    fail(ErrorCategory::unsupported,
         "quantized engine '" + requested +
             "' is not in this LibTorch build (has: " + (list.empty() ? "none" : list) + ")");
  }
  use_quantized_engine(chosen);
  return chosen;
}

void use_quantized_engine(const std::string& engine) {
  at::QEngine wanted = at::QEngine::NoQEngine;  // engine_name's inverse
  for (const at::QEngine known : {at::QEngine::ONEDNN, at::QEngine::FBGEMM, at::QEngine::QNNPACK})
    if (engine_name(known) == engine) wanted = known;
  if (wanted != at::QEngine::NoQEngine && at::globalContext().qEngine() != wanted)
    at::globalContext().setQEngine(wanted);
}

QuantizedProgram QuantizedProgram::convert(const LayerProgram& program, QuantMode mode,
                                           const std::vector<QuantParams>& output_params,
                                           const std::string& engine) {
  torch::NoGradGuard no_grad;
  QuantizedProgram result;
  result.mode_ = mode;
  result.engine_ = select_quantized_engine(engine);
  result.program_ = program;
  result.weight_int8_.resize(program.layers.size());
  result.weight_scale_.resize(program.layers.size());
  result.output_params_ = output_params;
  result.output_params_.resize(program.layers.size());
  if (mode != QuantMode::dynamic && output_params.size() != program.layers.size())
    fail(ErrorCategory::internal, "static conversion needs one QuantParams per layer");
  for (std::size_t index = 0; index < program.layers.size(); ++index) {
    Layer& layer = result.program_.layers[index];
    const bool quantize_this =
        layer.kind == LayerKind::linear || (mode != QuantMode::dynamic && has_weights(layer));
    if (quantize_this) {
      const torch::Tensor scales = weight_scales(layer.weight);
      const torch::Tensor zero_points = torch::zeros({scales.size(0)}, torch::kLong);
      result.weight_int8_[index] =
          torch::quantize_per_channel(layer.weight, scales, zero_points, 0, torch::kQInt8).int_repr();
      result.weight_scale_[index] = scales;
      layer.weight = torch::Tensor();  // the int8 copy replaces it
    }
  }
  result.pack();
  return result;
}

void QuantizedProgram::pack() {
  auto packed = std::make_shared<Packed>();
  packed->linear.resize(program_.layers.size());
  packed->conv.resize(program_.layers.size());
  for (std::size_t index = 0; index < program_.layers.size(); ++index) {
    if (!weight_int8_[index].defined()) continue;
    const Layer& layer = program_.layers[index];
    const torch::Tensor qweight = quantize_weight(weight_int8_[index], weight_scale_[index], engine_);
    if (layer.kind == LayerKind::linear)
      packed->linear[index] = prepack_linear(qweight, layer.bias);
    else
      packed->conv[index] = prepack_conv(qweight, layer.bias, {layer.stride, layer.stride},
                                         {layer.padding, layer.padding}, {1, 1}, 1);
  }
  packed_ = std::move(packed);
}

std::pair<torch::Tensor, torch::Tensor> QuantizedProgram::kernel_weight(std::size_t index) const {
  const torch::Tensor quantized = quantize_weight(weight_int8_.at(index), weight_scale_.at(index), engine_);
  return {quantized.int_repr(), quantized.q_per_channel_scales().to(torch::kDouble)};
}

torch::Tensor QuantizedProgram::forward(const torch::Tensor& pixels) const {
  torch::NoGradGuard no_grad;
  use_quantized_engine(engine_);
  torch::Tensor x = pad_input(program_, pixels.to(torch::kFloat).contiguous());
  const bool is_static = mode_ != QuantMode::dynamic;
  // Exact for 8-bit images. Clamped to what 8 bits hold first: quantize_per_tensor saturates, except that it
  // maps values of about 1e17 and above to 0 (LibTorch 1.13), i.e. a huge pixel would read as the darkest.
  if (is_static) x = torch::quantize_per_tensor(x.clamp(0.0, 1.0), 1.0 / 255.0, 0, torch::kQUInt8);
  for (std::size_t index = 0; index < program_.layers.size(); ++index) {
    const Layer& layer = program_.layers[index];
    const QuantParams& out = output_params_[index];
    switch (layer.kind) {
      case LayerKind::linear: {
        const LinearPacked& linear = packed_->linear[index];
        if (is_static)
          x = layer.relu ? linear->apply_relu(x, out.scale, out.zero_point)
                         : linear->apply(x, out.scale, out.zero_point);
        else
          x = layer.relu ? linear->apply_dynamic_relu(x, false) : linear->apply_dynamic(x, false);
        continue;
      }
      case LayerKind::conv2d:
        if (is_static) {
          const ConvPacked& conv = packed_->conv[index];
          x = layer.relu ? conv->apply_relu(x, out.scale, out.zero_point)
                         : conv->apply(x, out.scale, out.zero_point);
        } else {
          x = torch::conv2d(x, layer.weight, layer.bias, layer.stride, layer.padding);
          if (layer.relu) x = torch::relu(x);
        }
        continue;
      case LayerKind::max_pool2d:
        x = torch::max_pool2d(x, {layer.pool, layer.pool}, {layer.pool, layer.pool}, {0, 0}, {1, 1});
        continue;
      case LayerKind::flatten:
        x = x.flatten(1);
        continue;
    }
  }
  return is_static ? x.dequantize() : x;  // [B, classes]
}

std::int64_t QuantizedProgram::parameter_bytes() const {
  std::int64_t bytes = 0;
  for (std::size_t index = 0; index < program_.layers.size(); ++index) {
    const Layer& layer = program_.layers[index];
    if (weight_int8_[index].defined())
      bytes += weight_int8_[index].numel() + weight_scale_[index].numel() * 4;
    if (layer.weight.defined()) bytes += layer.weight.numel() * 4;
    if (layer.bias.defined()) bytes += layer.bias.numel() * 4;
  }
  return bytes;
}

void QuantizedProgram::save(const std::string& path, const Json& extra) const {
  Json meta;
  meta["model_name"] = program_.model_name;
  meta["mode"] = quant_mode_name(mode_);
  meta["engine"] = engine_;
  meta["input_shape"] = program_.input_shape;
  meta["num_classes"] = program_.num_classes;
  meta["input_padding"] = program_.input_padding;
  meta["input_pad_value"] = program_.input_pad_value;
  meta["layers"] = Json::array();
  for (std::size_t index = 0; index < program_.layers.size(); ++index) {
    const Layer& layer = program_.layers[index];
    Json entry = layer_metadata(layer);
    entry["output_scale"] = output_params_[index].scale;
    entry["output_zero_point"] = output_params_[index].zero_point;
    meta["layers"].push_back(entry);
  }
  meta["extra"] = extra;
  torch::serialize::OutputArchive archive;
  archive.write("ipj_int8_format", c10::IValue(static_cast<std::int64_t>(kInt8FormatVersion)));
  archive.write("meta_json", c10::IValue(meta.dump()));
  for (std::size_t index = 0; index < program_.layers.size(); ++index) {
    const std::string prefix = "layer" + std::to_string(index) + ".";
    const Layer& layer = program_.layers[index];
    if (weight_int8_[index].defined()) {
      archive.write(prefix + "weight_int8", weight_int8_[index]);
      archive.write(prefix + "weight_scale", weight_scale_[index]);
    }
    if (layer.weight.defined()) archive.write(prefix + "weight", layer.weight);
    if (layer.bias.defined()) archive.write(prefix + "bias", layer.bias);
  }
  save_sealed_archive(archive, path);
}

bool QuantizedProgram::is_int8_file(const std::string& path) {
  try {
    return detect_model_file(path) == ModelFileFormat::int8;
  } catch (const std::exception&) {  // any damage: "not this format"; its loader says why
    return false;
  }
}

std::string exact_quantized_engine() {
  const std::string preferred = select_quantized_engine("auto");
  if (!kernel_saturates(preferred)) return preferred;
  const std::vector<std::string> available = available_quantized_engines();
  return std::find(available.begin(), available.end(), "qnnpack") != available.end() ? "qnnpack" : "";
}

QuantizedProgram QuantizedProgram::load(const std::string& path, const std::string& engine) try {
  OpenedArchive opened = open_ipj_archive(path, "ipj_int8_format", kInt8FormatVersion, "int8 model");
  torch::serialize::InputArchive& archive = opened.archive;
  const Json& meta = opened.meta;
  QuantizedProgram result;
  try {
    result.mode_ = parse_quant_mode(meta.at("mode").get<std::string>());
    result.engine_ =
        select_quantized_engine(engine == "auto" ? meta.at("engine").get<std::string>() : engine);
    result.extra_ = meta.value("extra", Json::object());
    LayerProgram& program = result.program_;
    program.model_name = meta.at("model_name").get<std::string>();
    program.input_shape = meta.at("input_shape").get<std::vector<std::int64_t>>();
    program.num_classes = meta.at("num_classes").get<int>();
    program.input_padding = meta.at("input_padding").get<std::int64_t>();
    program.input_pad_value = meta.at("input_pad_value").get<std::vector<float>>();
    const Json& layers = meta.at("layers");
    result.weight_int8_.resize(layers.size());
    result.weight_scale_.resize(layers.size());
    for (std::size_t index = 0; index < layers.size(); ++index) {
      const Json& entry = layers[index];
      Layer layer = layer_from_metadata(entry);
      result.output_params_.push_back(
          {entry.at("output_scale").get<double>(), entry.at("output_zero_point").get<std::int64_t>()});
      const std::string prefix = "layer" + std::to_string(index) + ".";
      // Each read needs its own undefined tensor: reading into a defined one calls set_() on it (aliasing).
      torch::Tensor weight_int8, weight_scale, weight, bias;
      if (archive.try_read(prefix + "weight_int8", weight_int8)) {
        archive.read(prefix + "weight_scale", weight_scale);
        result.weight_int8_[index] = weight_int8;
        result.weight_scale_[index] = weight_scale;
      }
      if (archive.try_read(prefix + "weight", weight)) layer.weight = weight;
      if (archive.try_read(prefix + "bias", bias)) layer.bias = bias;
      program.layers.push_back(layer);
    }
    result.pack();
  } catch (const Json::exception& error) {
    fail(ErrorCategory::invalid_input, "'" + path + "': damaged int8 metadata: " + error.what());
  } catch (const c10::Error& error) {
    fail(ErrorCategory::invalid_input,
         "'" + path + "': damaged int8 model: " + error.what_without_backtrace());
  }
  return result;
} catch (...) {
  rethrow_as_load_error(path, "ipj int8 model");
}

}  // namespace ipj::quant
