// The shared pieces of XNNPACK int8 subgraphs (xnnpack_int8_subgraph.hpp). Limits: channelwise weights with
// zero point 0 (what ipj's int8 weights are); int32 biases saturate at +-2^31.
#ifdef IPJ_WITH_XNNPACK

#include <algorithm>

#include "xnnpack_int8_subgraph.hpp"

#include "ipj/core/error.hpp"

namespace ipj::infer::xnnpack {

void check_int8(xnn_status status, const std::string& where, const char* what) {
  if (status != xnn_status_success)
    fail(ErrorCategory::unsupported, "XNNPACK int8 runtime: " + where + " refused by XNNPACK's " + what +
                                         " (" + status_text(status) + ")");
}

std::vector<std::size_t> int8_dims(const Shape& aten_shape) {
  if (aten_shape.size() == 2)
    return {static_cast<std::size_t>(aten_shape[0]), 1, 1, static_cast<std::size_t>(aten_shape[1])};
  return xnn_dims(aten_shape);
}

std::uint32_t define_int8_value(Int8Subgraph& subgraph, const Shape& aten_shape,
                                const quant::QuantParams& params, const std::string& where) {
  const std::vector<std::size_t> dims = int8_dims(aten_shape);
  std::uint32_t id = XNN_INVALID_VALUE_ID;
  check_int8(xnn_define_quantized_tensor_value(subgraph.handle, xnn_datatype_qint8,
                                               static_cast<std::int32_t>(params.zero_point - 128),
                                               static_cast<float>(params.scale), dims.size(), dims.data(),
                                               nullptr, XNN_INVALID_VALUE_ID, 0, &id),
             where, "int8 value");
  return id;
}

Int8Value define_int8_input(Int8Subgraph& subgraph, const Shape& aten_shape,
                            const quant::QuantParams& params) {
  const std::vector<std::size_t> dims = int8_dims(aten_shape);
  std::uint32_t input_id = XNN_INVALID_VALUE_ID;
  check_int8(xnn_define_tensor_value(subgraph.handle, xnn_datatype_fp32, dims.size(), dims.data(), nullptr, 0,
                                     XNN_VALUE_FLAG_EXTERNAL_INPUT, &input_id),
             "the input", "input value");
  Int8Value value;
  value.aten_shape = aten_shape;
  value.params = params;
  value.id = define_int8_value(subgraph, aten_shape, params, "the input");
  check_int8(xnn_define_convert(subgraph.handle, input_id, value.id, 0), "the input", "quantize");
  return value;
}

void define_dequantized_output(Int8Subgraph& subgraph, const Int8Value& value) {
  const std::vector<std::size_t> dims = int8_dims(value.aten_shape);
  std::uint32_t output_id = XNN_INVALID_VALUE_ID;
  check_int8(xnn_define_tensor_value(subgraph.handle, xnn_datatype_fp32, dims.size(), dims.data(), nullptr, 1,
                                     XNN_VALUE_FLAG_EXTERNAL_OUTPUT, &output_id),
             "the output", "output value");
  check_int8(xnn_define_convert(subgraph.handle, value.id, output_id, 0), "the output", "dequantize");
}

namespace {

// The weight in XNNPACK's layout: [O, kh, kw, I/groups]; a linear layer's as [O, 1, 1, I].
torch::Tensor xnnpack_weight(const Int8Convolution& convolution, const Int8Value& input,
                             const std::string& where) {
  torch::Tensor weight = convolution.weight;
  if (weight.dim() == 4) return weight.permute({0, 2, 3, 1}).contiguous();
  if (input.aten_shape.size() != 2)
    fail(ErrorCategory::unsupported,
         "XNNPACK int8 runtime: " + where + " reads a value that is not [N, features]");
  if (!input.flattened_chw.empty()) {
    const Shape& chw = input.flattened_chw;
    weight = weight.view({weight.size(0), chw[0], chw[1], chw[2]}).permute({0, 2, 3, 1});
  }
  return weight.reshape({weight.size(0), 1, 1, -1}).contiguous();
}

}  // namespace

void define_int8_convolution(Int8Subgraph& subgraph, const Int8Convolution& convolution,
                             const Int8Value& input, const Int8Value& output, const std::string& where) {
  torch::Tensor weight = xnnpack_weight(convolution, input, where);  // int8 [O, kh, kw, I/groups]
  const std::int64_t out_channels = weight.size(0);
  // scales as float (XNNPACK reads them until the runtime is made); biases in int32 at input x weight scale
  torch::Tensor weight_scale = convolution.scales.to(torch::kDouble);  // [O]
  // A channel whose weights are all zero or tiny (a pruned filter that kept its bias) has a tiny weight scale
  // (1e-8 for zeros), and its bias at input x weight scale would not fit in int32: such a channel takes the
  // smallest scale at which the bias fits in 2^30 (room left for the sums), its weights re-rounded to it
  // (only smaller). LibTorch's kernels keep biases in float and need no such step.
  const torch::Tensor fitting =
      convolution.bias.to(torch::kDouble).abs() / (input.params.scale * 1073741824.0);  // [O]
  const torch::Tensor raise = fitting > weight_scale;
  if (raise.any().item<bool>()) {
    const torch::Tensor raised = torch::where(raise, fitting, weight_scale);
    weight = (weight.to(torch::kDouble) * (weight_scale / raised).view({-1, 1, 1, 1}))
                 .round()
                 .clamp(-127.0, 127.0)
                 .to(torch::kChar)
                 .contiguous();
    weight_scale = raised;
  }
  const torch::Tensor bias_scale = weight_scale * input.params.scale;  // [O]
  const torch::Tensor bias = (convolution.bias.to(torch::kDouble) / bias_scale)
                                 .round()
                                 .clamp(-2147483647.0, 2147483647.0)
                                 .to(torch::kInt)
                                 .contiguous();
  const torch::Tensor scales = weight_scale.to(torch::kFloat).contiguous();
  const torch::Tensor bias_scales = bias_scale.to(torch::kFloat).contiguous();
  subgraph.weights.insert(subgraph.weights.end(), {weight, bias, scales, bias_scales});
  const std::vector<std::size_t> weight_dims(weight.sizes().begin(), weight.sizes().end());
  const std::size_t bias_dims[1] = {static_cast<std::size_t>(out_channels)};
  std::uint32_t weight_id = XNN_INVALID_VALUE_ID, bias_id = XNN_INVALID_VALUE_ID;
  check_int8(xnn_define_channelwise_quantized_tensor_value(
                 subgraph.handle, xnn_datatype_qcint8, scales.data_ptr<float>(), 4, 0, weight_dims.data(),
                 weight.data_ptr<std::int8_t>(), XNN_INVALID_VALUE_ID, 0, &weight_id),
             where, "int8 weights");
  check_int8(xnn_define_channelwise_quantized_tensor_value(
                 subgraph.handle, xnn_datatype_qcint32, bias_scales.data_ptr<float>(), 1, 0, bias_dims,
                 bias.data_ptr<std::int32_t>(), XNN_INVALID_VALUE_ID, 0, &bias_id),
             where, "int32 biases");
  const auto u32 = [](std::int64_t value) { return static_cast<std::uint32_t>(value); };
  const Int8Convolution& c = convolution;
  check_int8(xnn_define_convolution_2d(
                 subgraph.handle, u32(c.pad_top), u32(c.pad_right), u32(c.pad_bottom), u32(c.pad_left),
                 u32(weight.size(1)), u32(weight.size(2)), u32(c.stride[0]), u32(c.stride[1]),
                 u32(c.dilation[0]), u32(c.dilation[1]), u32(c.groups), u32(weight.size(3)),
                 u32(out_channels / c.groups), c.low, c.high, input.id, weight_id, bias_id, output.id, 0),
             where, "convolution");
}

std::shared_ptr<InferenceModel> int8_runtime_model(
    quant::QuantMode mode, const std::function<std::pair<Shape, Shape>(Int8Subgraph&)>& define,
    std::vector<std::int64_t> sample_shape, PrepareInput prepare, std::shared_ptr<const InferenceModel> busy,
    int threads, WriteInput write) {
  if (!initialised())
    fail(ErrorCategory::unsupported, "XNNPACK int8 runtime: XNNPACK does not initialise on this CPU");
  if (mode == quant::QuantMode::dynamic)
    fail(ErrorCategory::unsupported,
         "XNNPACK int8 runtime: dynamic int8 quantizes activations per batch; only static and QAT int8 "
         "have fixed scales");
  Int8Subgraph subgraph;
  if (xnn_create_subgraph(2, 0, &subgraph.handle) != xnn_status_success)
    fail(ErrorCategory::unsupported, "XNNPACK int8 runtime: no subgraph could be created");
  std::pair<Shape, Shape> shapes;
  try {
    shapes = define(subgraph);
  } catch (...) {
    xnn_delete_subgraph(subgraph.handle);
    throw;
  }
  return std::make_shared<PlannedRuntimeModel>(
      subgraph.handle, std::move(shapes.first), std::move(shapes.second), std::move(sample_shape),
      std::move(prepare), std::max(1, threads), std::move(busy), XnnpackIdle::sleep, std::move(write));
}

}  // namespace ipj::infer::xnnpack

#endif
