// A static (or QAT) int8 LayerProgram as one XNNPACK subgraph runtime in signed 8 bits: ipj's quint8
// activations become qint8 with the zero point moved by 128 (the same real values), per-channel int8 weights
// XNNPACK's channelwise ones, linear layers 1x1 convolutions (this XNNPACK's fully connected layer takes one
// weight scale only). Limits: one batch size; dynamic int8 is refused (its scales change per batch).
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "ipj/core/error.hpp"
#include "ipj/infer/xnnpack_runtime.hpp"
#include "xnnpack_planned_runtime.hpp"

namespace ipj::infer {

#ifndef IPJ_WITH_XNNPACK

std::shared_ptr<InferenceModel> xnnpack_int8_runtime_model(const quant::QuantizedProgram&, std::int64_t,
                                                           std::shared_ptr<const InferenceModel>) {
  fail(ErrorCategory::unsupported,
       "this ipj was built without XNNPACK's subgraph API (install libxnnpack-dev and libpthreadpool-dev, "
       "then rebuild)");
}

#else

namespace {

using xnnpack::Shape;

// A layer's output: its id, ATen shape ([N, C, H, W] or [N, F]; 2-D values are [N, 1, 1, F] in XNNPACK so
// that linear layers can be 1x1 convolutions), the [C, H, W] a flatten came from (elements in H, W, C
// order), and its int8 parameters (ipj's quint8 ones).
struct Int8Value {
  std::uint32_t id = XNN_INVALID_VALUE_ID;
  Shape aten_shape;
  Shape flattened_chw;
  quant::QuantParams params;
};

struct Int8Subgraph {
  xnn_subgraph_t handle = nullptr;
  // Static data (weights, biases and their scales), alive until the runtime has packed its own copy.
  std::vector<torch::Tensor> weights;
};

[[noreturn]] void refuse_layer(std::size_t index, const quant::Layer& layer, const std::string& why) {
  fail(ErrorCategory::unsupported, "XNNPACK int8 runtime: layer " + std::to_string(index) + " (" +
                                       quant::layer_kind_name(layer.kind) + ") " + why);
}

void check_xnn(xnn_status status, std::size_t index, const quant::Layer& layer, const char* what) {
  if (status != xnn_status_success)
    refuse_layer(index, layer,
                 std::string("refused by XNNPACK's ") + what + " (status " +
                     std::to_string(static_cast<int>(status)) + ")");
}

// XNNPACK dims of a value: 4-D in NHWC, 2-D [N, F] as [N, 1, 1, F].
std::vector<std::size_t> int8_dims(const Shape& aten_shape) {
  if (aten_shape.size() == 2)
    return {static_cast<std::size_t>(aten_shape[0]), 1, 1, static_cast<std::size_t>(aten_shape[1])};
  return xnnpack::xnn_dims(aten_shape);
}

// An internal qint8 value with ipj's quint8 parameters (zero point - 128).
std::uint32_t define_int8_value(Int8Subgraph& subgraph, const Shape& aten_shape,
                                const quant::QuantParams& params, std::size_t index,
                                const quant::Layer& layer) {
  const std::vector<std::size_t> dims = int8_dims(aten_shape);
  std::uint32_t id = XNN_INVALID_VALUE_ID;
  check_xnn(xnn_define_quantized_tensor_value(subgraph.handle, xnn_datatype_qint8,
                                              static_cast<std::int32_t>(params.zero_point - 128),
                                              static_cast<float>(params.scale), dims.size(), dims.data(),
                                              nullptr, XNN_INVALID_VALUE_ID, 0, &id),
            index, layer, "int8 value");
  return id;
}

// Output shape of a weighted or pooling layer on `in`.
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

// conv2d or linear (a 1x1 convolution on [N, 1, 1, F]) with channelwise int8 weights and int32 biases at
// scale input scale x weight scale; ReLU as the output range.
void define_weighted(Int8Subgraph& subgraph, const quant::QuantizedProgram& int8, std::size_t index,
                     const Int8Value& input, const Int8Value& output) {
  const quant::Layer& layer = int8.program().layers[index];
  auto [weight, weight_scale] = int8.kernel_weight(index);  // int8 [O, I, kh, kw] / [O, I], double [O]
  if (layer.kind == quant::LayerKind::linear) {
    if (input.aten_shape.size() != 2) refuse_layer(index, layer, "reads a value that is not [N, features]");
    if (!input.flattened_chw.empty()) {
      const Shape& chw = input.flattened_chw;
      weight = weight.view({weight.size(0), chw[0], chw[1], chw[2]}).permute({0, 2, 3, 1});
    }
    weight = weight.reshape({weight.size(0), 1, 1, -1});  // [O, 1, 1, I]
  } else {
    if (input.aten_shape.size() != 4) refuse_layer(index, layer, "reads a value that is not [N, C, H, W]");
    weight = weight.permute({0, 2, 3, 1});  // [O, I, kh, kw] -> [O, kh, kw, I]
  }
  weight = weight.contiguous();
  subgraph.weights.push_back(weight);
  // scales as float (XNNPACK reads them until the runtime is made); biases in int32 at input x weight scale
  const torch::Tensor bias_scale = weight_scale * input.params.scale;  // [O]
  const torch::Tensor bias = (layer.bias.to(torch::kDouble) / bias_scale)
                                 .round()
                                 .clamp(-2147483647.0, 2147483647.0)
                                 .to(torch::kInt)
                                 .contiguous();
  const torch::Tensor scales = weight_scale.to(torch::kFloat).contiguous();
  const torch::Tensor bias_scales = bias_scale.to(torch::kFloat).contiguous();
  subgraph.weights.insert(subgraph.weights.end(), {bias, scales, bias_scales});
  const std::vector<std::size_t> weight_dims(weight.sizes().begin(), weight.sizes().end());
  const std::size_t bias_dims[1] = {static_cast<std::size_t>(weight.size(0))};
  std::uint32_t weight_id = XNN_INVALID_VALUE_ID, bias_id = XNN_INVALID_VALUE_ID;
  check_xnn(xnn_define_channelwise_quantized_tensor_value(
                subgraph.handle, xnn_datatype_qcint8, scales.data_ptr<float>(), 4, 0, weight_dims.data(),
                weight.data_ptr<std::int8_t>(), XNN_INVALID_VALUE_ID, 0, &weight_id),
            index, layer, "int8 weights");
  check_xnn(xnn_define_channelwise_quantized_tensor_value(
                subgraph.handle, xnn_datatype_qcint32, bias_scales.data_ptr<float>(), 1, 0, bias_dims,
                bias.data_ptr<std::int32_t>(), XNN_INVALID_VALUE_ID, 0, &bias_id),
            index, layer, "int32 biases");
  constexpr float inf = std::numeric_limits<float>::infinity();
  const float low = layer.relu ? 0.0f : -inf;
  const auto u32 = [](std::int64_t value) { return static_cast<std::uint32_t>(value); };
  const bool conv = layer.kind == quant::LayerKind::conv2d;
  const std::uint32_t pad = conv ? u32(layer.padding) : 0, stride = conv ? u32(layer.stride) : 1;
  check_xnn(
      xnn_define_convolution_2d(subgraph.handle, pad, pad, pad, pad, u32(weight.size(1)), u32(weight.size(2)),
                                stride, stride, 1, 1, 1, u32(weight.size(3)), u32(weight.size(0)), low, inf,
                                input.id, weight_id, bias_id, output.id, 0),
      index, layer, "convolution");
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
    next.id = define_int8_value(subgraph, next.aten_shape, next.params, index, layer);
    const auto u32 = [](std::int64_t size) { return static_cast<std::uint32_t>(size); };
    switch (layer.kind) {
      case quant::LayerKind::conv2d:
      case quant::LayerKind::linear:
        define_weighted(subgraph, int8, index, value, next);
        break;
      case quant::LayerKind::max_pool2d:
        if (value.aten_shape.size() != 4)
          refuse_layer(index, layer, "reads a value that is not [N, C, H, W]");
        check_xnn(xnn_define_max_pooling_2d(subgraph.handle, 0, 0, 0, 0, u32(layer.pool), u32(layer.pool),
                                            u32(layer.pool), u32(layer.pool), 1, 1,
                                            -std::numeric_limits<float>::infinity(),
                                            std::numeric_limits<float>::infinity(), value.id, next.id, 0),
                  index, layer, "max pooling");
        break;
      case quant::LayerKind::flatten: {
        if (value.aten_shape.size() != 4)
          refuse_layer(index, layer, "reads a value that is not [N, C, H, W]");
        if (value.aten_shape[2] * value.aten_shape[3] > 1)
          next.flattened_chw = {value.aten_shape[1], value.aten_shape[2], value.aten_shape[3]};
        const std::vector<std::size_t> dims = int8_dims(next.aten_shape);
        check_xnn(xnn_define_static_reshape(subgraph.handle, dims.size(), dims.data(), value.id, next.id, 0),
                  index, layer, "reshape");
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
  const quant::Layer& first = program.layers.front();
  const Shape input_shape{batch, program.input_shape[0], program.input_shape[1] + 2 * program.input_padding,
                          program.input_shape[2] + 2 * program.input_padding};
  const std::vector<std::size_t> input_dims = xnnpack::xnn_dims(input_shape);
  std::uint32_t input_id = XNN_INVALID_VALUE_ID;
  check_xnn(xnn_define_tensor_value(subgraph.handle, xnn_datatype_fp32, input_dims.size(), input_dims.data(),
                                    nullptr, 0, XNN_VALUE_FLAG_EXTERNAL_INPUT, &input_id),
            0, first, "input value");
  Int8Value value;
  value.aten_shape = input_shape;
  value.params = {1.0 / 255.0, 0};  // the pixels' quint8 parameters, as QuantizedProgram::forward's
  value.id = define_int8_value(subgraph, input_shape, value.params, 0, first);
  check_xnn(xnn_define_convert(subgraph.handle, input_id, value.id, 0), 0, first, "quantize");
  define_layers(subgraph, int8, value);
  const std::vector<std::size_t> output_dims = int8_dims(value.aten_shape);
  std::uint32_t output_id = XNN_INVALID_VALUE_ID;
  check_xnn(
      xnn_define_tensor_value(subgraph.handle, xnn_datatype_fp32, output_dims.size(), output_dims.data(),
                              nullptr, 1, XNN_VALUE_FLAG_EXTERNAL_OUTPUT, &output_id),
      program.layers.size() - 1, program.layers.back(), "output value");
  check_xnn(xnn_define_convert(subgraph.handle, value.id, output_id, 0), program.layers.size() - 1,
            program.layers.back(), "dequantize");
  return {input_shape, value.aten_shape};
}

}  // namespace

std::shared_ptr<InferenceModel> xnnpack_int8_runtime_model(const quant::QuantizedProgram& int8,
                                                           std::int64_t batch,
                                                           std::shared_ptr<const InferenceModel> busy) {
  if (!xnnpack::initialised())
    fail(ErrorCategory::unsupported, "XNNPACK int8 runtime: XNNPACK does not initialise on this CPU");
  if (int8.mode() == quant::QuantMode::dynamic)
    fail(ErrorCategory::unsupported,
         "XNNPACK int8 runtime: dynamic int8 quantizes activations per batch; only static and QAT int8 "
         "have fixed scales");
  Int8Subgraph subgraph;
  if (xnn_create_subgraph(2, 0, &subgraph.handle) != xnn_status_success)
    fail(ErrorCategory::unsupported, "XNNPACK int8 runtime: no subgraph could be created");
  std::pair<Shape, Shape> shapes;
  try {
    shapes = build_int8_subgraph(subgraph, int8, batch);
  } catch (...) {
    xnn_delete_subgraph(subgraph.handle);
    throw;
  }
  quant::LayerProgram preprocessing = int8.program();
  preprocessing.layers.clear();  // what pad_input reads stays
  const xnnpack::PrepareInput prepare = [preprocessing](const torch::Tensor& pixels) {
    return quant::pad_input(preprocessing, pixels.to(torch::kFloat));
  };
  return std::make_shared<xnnpack::PlannedRuntimeModel>(subgraph.handle, shapes.first, shapes.second,
                                                        int8.program().input_shape, prepare, 1,
                                                        std::move(busy), XnnpackIdle::sleep);
}

#endif

}  // namespace ipj::infer
