// A static (or QAT) int8 LayerProgram as one XNNPACK subgraph runtime in signed 8 bits (pieces shared with
// int8 graphs: xnnpack_int8_subgraph.hpp). Limits: one batch size; dynamic int8 is refused (its scales
// change per batch).
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>
#include <vector>

#include "ipj/core/error.hpp"
#include "ipj/infer/xnnpack_runtime.hpp"
#include "xnnpack_int8_subgraph.hpp"

namespace ipj::infer {

#ifdef IPJ_WITH_XNNPACK  // else xnnpack_runtime.cpp says how to get it

namespace {

using xnnpack::check_int8;
using xnnpack::define_int8_value;
using xnnpack::Int8Subgraph;
using xnnpack::Int8Value;
using xnnpack::Shape;

std::string layer_text(std::size_t index, const quant::Layer& layer) {
  return "layer " + std::to_string(index) + " (" + quant::layer_kind_name(layer.kind) + ")";
}

[[noreturn]] void refuse_layer(std::size_t index, const quant::Layer& layer, const std::string& why) {
  fail(ErrorCategory::unsupported, "XNNPACK int8 runtime: " + layer_text(index, layer) + " " + why);
}

// Output shape of a layer on `in` (weight_out / kernel: a weighted layer's output channels / kernel size).
Shape layer_output_shape(const quant::Layer& layer, const Shape& in, std::int64_t weight_out,
                         std::int64_t kernel) {
  const auto spatial = [](std::int64_t size, std::int64_t k, std::int64_t stride, std::int64_t pad) {
    return (size + 2 * pad - k) / stride + 1;
  };
  switch (layer.kind) {
    case quant::LayerKind::conv2d:
      return {in[0], weight_out, spatial(in[2], kernel, layer.stride, layer.padding),
              spatial(in[3], kernel, layer.stride, layer.padding)};
    case quant::LayerKind::linear:
      return {in[0], weight_out};
    case quant::LayerKind::max_pool2d:
      return {in[0], in[1], in[2] / layer.pool, in[3] / layer.pool};
    case quant::LayerKind::flatten:
      return {in[0], in[1] * in[2] * in[3]};
  }
  return in;
}

// conv2d or linear with the weights LibTorch's kernels run; ReLU as the output range.
void define_weighted(Int8Subgraph& subgraph, const quant::QuantizedProgram& int8, std::size_t index,
                     const Int8Value& input, const Int8Value& output) {
  const quant::Layer& layer = int8.program().layers[index];
  if (layer.kind == quant::LayerKind::conv2d && input.aten_shape.size() != 4)
    refuse_layer(index, layer, "reads a value that is not [N, C, H, W]");
  xnnpack::Int8Convolution convolution;
  std::tie(convolution.weight, convolution.scales) = int8.kernel_weight(index);
  convolution.bias = layer.bias;
  if (layer.kind == quant::LayerKind::conv2d) {
    convolution.stride = {layer.stride, layer.stride};
    convolution.pad_top = convolution.pad_right = convolution.pad_bottom = convolution.pad_left =
        layer.padding;
  }
  if (layer.relu) convolution.low = 0.0f;
  define_int8_convolution(subgraph, convolution, input, output, layer_text(index, layer));
}

// Layers after the input: each output a new qint8 value (pools and flatten keep their input's parameters).
void define_layers(Int8Subgraph& subgraph, const quant::QuantizedProgram& int8, Int8Value& value) {
  const std::vector<quant::Layer>& layers = int8.program().layers;
  for (std::size_t index = 0; index < layers.size(); ++index) {
    const quant::Layer& layer = layers[index];
    const bool weighted = quant::has_weights(layer);
    if (weighted && !int8.weight_int8()[index].defined()) refuse_layer(index, layer, "has float weights");
    const torch::Tensor& weight = weighted ? int8.weight_int8()[index] : torch::Tensor();
    Int8Value next;
    next.params = weighted ? int8.output_params()[index] : value.params;
    next.aten_shape = layer_output_shape(layer, value.aten_shape, weighted ? weight.size(0) : 0,
                                         weight.dim() == 4 ? weight.size(2) : 1);
    if (layer.kind == quant::LayerKind::conv2d && weight.size(2) != weight.size(3))
      refuse_layer(index, layer, "has a kernel that is not square");
    next.id = define_int8_value(subgraph, next.aten_shape, next.params, layer_text(index, layer));
    const auto u32 = [](std::int64_t size) { return static_cast<std::uint32_t>(size); };
    switch (layer.kind) {
      case quant::LayerKind::conv2d:
      case quant::LayerKind::linear:
        define_weighted(subgraph, int8, index, value, next);
        break;
      case quant::LayerKind::max_pool2d:
        if (value.aten_shape.size() != 4)
          refuse_layer(index, layer, "reads a value that is not [N, C, H, W]");
        check_int8(xnn_define_max_pooling_2d(subgraph.handle, 0, 0, 0, 0, u32(layer.pool), u32(layer.pool),
                                             u32(layer.pool), u32(layer.pool), 1, 1,
                                             -std::numeric_limits<float>::infinity(),
                                             std::numeric_limits<float>::infinity(), value.id, next.id, 0),
                   layer_text(index, layer), "max pooling");
        break;
      case quant::LayerKind::flatten: {
        if (value.aten_shape.size() != 4)
          refuse_layer(index, layer, "reads a value that is not [N, C, H, W]");
        if (value.aten_shape[2] * value.aten_shape[3] > 1)
          next.flattened_chw = {value.aten_shape[1], value.aten_shape[2], value.aten_shape[3]};
        const std::vector<std::size_t> dims = xnnpack::int8_dims(next.aten_shape);
        check_int8(xnn_define_static_reshape(subgraph.handle, dims.size(), dims.data(), value.id, next.id, 0),
                   layer_text(index, layer), "reshape");
        break;
      }
    }
    value = std::move(next);
  }
  if (!value.flattened_chw.empty())
    refuse_layer(layers.size() - 1, layers.back(), "is the output but holds a flattened [C, H, W]");
}

// Pixels (fp32, external 0) -> qint8 at 1/255 -> the layers -> fp32 (external 1). Returns the ATen shapes
// of the two external values.
std::pair<Shape, Shape> build_int8_subgraph(Int8Subgraph& subgraph, const quant::QuantizedProgram& int8,
                                            std::int64_t batch) {
  const quant::LayerProgram& program = int8.program();
  if (program.layers.empty() || program.input_shape.size() != 3)
    fail(ErrorCategory::unsupported, "XNNPACK int8 runtime: the program has no layers or no [C, H, W] input");
  const Shape input_shape{batch, program.input_shape[0], program.input_shape[1] + 2 * program.input_padding,
                          program.input_shape[2] + 2 * program.input_padding};
  // the pixels' quint8 parameters, as QuantizedProgram::forward's
  Int8Value value = xnnpack::define_int8_input(subgraph, input_shape, {1.0 / 255.0, 0});
  define_layers(subgraph, int8, value);
  xnnpack::define_dequantized_output(subgraph, value);
  return {input_shape, value.aten_shape};
}

}  // namespace

std::shared_ptr<InferenceModel> xnnpack_int8_runtime_model(const quant::QuantizedProgram& int8,
                                                           std::int64_t batch,
                                                           std::shared_ptr<const InferenceModel> busy,
                                                           int threads) {
  quant::LayerProgram preprocessing = int8.program();
  preprocessing.layers.clear();  // what pad_input reads stays
  const xnnpack::PrepareInput prepare = [preprocessing](const torch::Tensor& pixels) {
    return quant::pad_input(preprocessing, pixels.to(torch::kFloat));
  };
  return xnnpack::int8_runtime_model(
      int8.mode(), [&](Int8Subgraph& subgraph) { return build_int8_subgraph(subgraph, int8, batch); },
      int8.program().input_shape, prepare, std::move(busy), threads);
}

#endif

}  // namespace ipj::infer
