// Extraction of ipj's sequential models into a LayerProgram (BN and input normalisation folded) and its float
// forward pass. Folding is exact up to float rounding; the padded first convolution is handled by
// input_padding.
#include "ipj/quant/layer_program.hpp"

#include <torch/torch.h>

#include "ipj/core/error.hpp"
#include "ipj/models/catalog.hpp"

namespace ipj::quant {
namespace {

torch::Tensor parameter(models::Classifier& model, const std::string& name) {
  const auto parameters = model.named_parameters(true);
  if (const torch::Tensor* found = parameters.find(name)) return found->detach().clone().to(torch::kFloat);
  const auto buffers = model.named_buffers(true);
  if (const torch::Tensor* found = buffers.find(name)) return found->detach().clone().to(torch::kFloat);
  fail(ErrorCategory::invalid_input, "model has no tensor '" + name + "' (is the checkpoint from this ipj?)");
}

Layer linear_layer(models::Classifier& model, const std::string& name, bool relu) {
  Layer layer;
  layer.kind = LayerKind::linear;
  layer.weight = parameter(model, name + ".weight");
  layer.bias = parameter(model, name + ".bias");
  layer.relu = relu;
  return layer;
}

// conv (no bias) followed by BatchNorm in eval mode: w' = w * gamma / sqrt(var + eps), b' = beta - mean *
// that.
Layer conv_bn_layer(models::Classifier& model, const std::string& conv, const std::string& bn,
                    std::int64_t padding) {
  const double eps = 1e-5;  // torch::nn::BatchNorm2d's default, used by ipj's models
  Layer layer;
  layer.kind = LayerKind::conv2d;
  const torch::Tensor weight = parameter(model, conv + ".weight");  // [out, in, kh, kw]
  const torch::Tensor gamma = parameter(model, bn + ".weight");     // [out]
  const torch::Tensor beta = parameter(model, bn + ".bias");
  const torch::Tensor running_mean = parameter(model, bn + ".running_mean");
  const torch::Tensor running_var = parameter(model, bn + ".running_var");
  const torch::Tensor factor = gamma / torch::sqrt(running_var + eps);  // [out]
  layer.weight = weight * factor.view({-1, 1, 1, 1});
  layer.bias = beta - running_mean * factor;
  layer.relu = true;
  layer.padding = padding;
  return layer;
}

// Folds x_norm = (pixels - mean) / std into the first weighted layer so the program takes raw pixels.
void fold_normalization(LayerProgram& program, const std::vector<float>& mean,
                        const std::vector<float>& std) {
  const std::int64_t channels = program.input_shape.at(0);
  if (static_cast<std::int64_t>(mean.size()) != channels || static_cast<std::int64_t>(std.size()) != channels)
    fail(ErrorCategory::invalid_input, "model_info: mean/std need one value per input channel");
  const torch::Tensor mean_tensor = torch::tensor(mean);  // [C]
  const torch::Tensor std_tensor = torch::tensor(std);    // [C]
  for (Layer& layer : program.layers) {
    if (layer.kind == LayerKind::conv2d) {
      // w: [out, C, kh, kw]
      const torch::Tensor scaled = layer.weight / std_tensor.view({1, -1, 1, 1});
      layer.bias = layer.bias - (scaled * mean_tensor.view({1, -1, 1, 1})).sum({1, 2, 3});
      layer.weight = scaled;
      program.input_padding = layer.padding;
      program.input_pad_value = mean;
      layer.padding = 0;
      return;
    }
    if (layer.kind == LayerKind::linear) {
      // after flatten: feature i belongs to channel i / (H * W); w: [out, C*H*W]
      const std::int64_t per_channel = layer.weight.size(1) / channels;
      const torch::Tensor feature_std = std_tensor.repeat_interleave(per_channel);    // [C*H*W]
      const torch::Tensor feature_mean = mean_tensor.repeat_interleave(per_channel);  // [C*H*W]
      const torch::Tensor scaled = layer.weight / feature_std.view({1, -1});
      layer.bias = layer.bias - torch::matmul(scaled, feature_mean);
      layer.weight = scaled;
      return;
    }
  }
}

// One step of the catalog's layer line (models::ProgramStep) read from the model's modules.
Layer layer_for_step(models::Classifier& model, const models::ProgramStep& step) {
  using Kind = models::ProgramStep::Kind;
  Layer layer;
  switch (step.kind) {
    case Kind::flatten:
      layer.kind = LayerKind::flatten;
      return layer;
    case Kind::max_pool2d:
      layer.kind = LayerKind::max_pool2d;
      return layer;
    case Kind::linear:
      return linear_layer(model, step.module, step.relu);
    case Kind::conv_bn:
      return conv_bn_layer(model, step.module, step.norm, step.padding);
  }
  fail(ErrorCategory::internal, "layer_for_step: unknown program step kind");
}

}  // namespace

std::string layer_kind_name(LayerKind kind) {
  switch (kind) {
    case LayerKind::linear:
      return "linear";
    case LayerKind::conv2d:
      return "conv2d";
    case LayerKind::max_pool2d:
      return "max_pool2d";
    case LayerKind::flatten:
      return "flatten";
  }
  return "unknown";
}

LayerProgram extract_program(models::Classifier& model, const Json& model_info) {
  if (!model_info.is_object() || !model_info.contains("name"))
    fail(ErrorCategory::invalid_input,
         "the checkpoint has no model_info (written by ipj >= 0.1 train); retrain it with this ipj");
  torch::NoGradGuard no_grad;
  LayerProgram program;
  program.model_name = model_info.at("name").get<std::string>();
  program.input_shape = model_info.at("input_shape").get<std::vector<std::int64_t>>();
  program.num_classes = model_info.at("num_classes").get<int>();
  const models::ModelEntry* entry = models::find_model_entry(program.model_name);
  if (entry == nullptr || !entry->has_layer_program())
    fail(ErrorCategory::unsupported,
         "model '" + program.model_name +
             "' is not a straight line of layers; int8 conversion, pruning and distillation support " +
             models::model_names_where(
                 [](const models::ModelEntry& known) { return known.has_layer_program(); }) +
             " (export TorchScript for others)");
  for (const models::ProgramStep& step : entry->layer_program)
    program.layers.push_back(layer_for_step(model, step));
  fold_normalization(program, model_info.at("mean").get<std::vector<float>>(),
                     model_info.at("std").get<std::vector<float>>());
  return program;
}

torch::Tensor pad_input(const LayerProgram& program, const torch::Tensor& pixels) {
  if (program.input_padding == 0) return pixels;
  const std::int64_t pad = program.input_padding;
  const torch::Tensor value = torch::tensor(program.input_pad_value).view({1, -1, 1, 1});  // [1, C, 1, 1]
  return torch::constant_pad_nd(pixels - value, {pad, pad, pad, pad}, 0.0) + value;
}

torch::Tensor run_float(const LayerProgram& program, const torch::Tensor& pixels,
                        const LayerObserver& observe) {
  torch::Tensor x = pad_input(program, pixels);  // [B, C, H(+2p), W(+2p)]
  for (std::size_t index = 0; index < program.layers.size(); ++index) {
    const Layer& layer = program.layers[index];
    switch (layer.kind) {
      case LayerKind::linear:
        x = torch::linear(x, layer.weight, layer.bias);
        break;
      case LayerKind::conv2d:
        x = torch::conv2d(x, layer.weight, layer.bias, layer.stride, layer.padding);
        break;
      case LayerKind::max_pool2d:
        x = torch::max_pool2d(x, {layer.pool, layer.pool}, {layer.pool, layer.pool}, {0, 0}, {1, 1});
        break;
      case LayerKind::flatten:
        x = x.flatten(1);
        break;
    }
    if (layer.relu) x = torch::relu(x);
    if (observe && (layer.kind == LayerKind::linear || layer.kind == LayerKind::conv2d)) observe(index, x);
  }
  return x;
}

std::int64_t float_parameter_bytes(const LayerProgram& program) {
  std::int64_t bytes = 0;
  for (const Layer& layer : program.layers)
    if (layer.weight.defined()) bytes += (layer.weight.numel() + layer.bias.numel()) * 4;
  return bytes;
}

std::int64_t multiply_accumulates(const LayerProgram& program) {
  torch::NoGradGuard no_grad;
  std::int64_t total = 0;
  const torch::Tensor sample =
      torch::zeros({1, program.input_shape[0], program.input_shape[1], program.input_shape[2]});
  run_float(program, sample, [&](std::size_t index, const torch::Tensor& output) {
    const Layer& layer = program.layers[index];
    // linear: out*in; conv: out*in*kh*kw per output pixel
    total += layer.kind == LayerKind::conv2d ? layer.weight.numel() * output.size(2) * output.size(3)
                                             : layer.weight.numel();
  });
  return total;
}

bool has_weights(const Layer& layer) {
  return layer.kind == LayerKind::linear || layer.kind == LayerKind::conv2d;
}

}  // namespace ipj::quant
