// Direct TorchScript -> ONNX: static int8 files in PyTorch's quantized TorchScript form (what `ipj quantize
// --mode static` writes for models the graph IR refuses) as QDQ. A quantized tensor travels as the float
// tensor of its dequantized values: quantize_per_tensor -> QuantizeLinear + DequantizeLinear, int8
// conv/linear/add -> the float op on DequantizeLinear'd int8 weights, then QuantizeLinear + DequantizeLinear
// at the output scale. Limits: per-tensor activations (quint8), per-tensor or per-channel (axis 0) qint8
// weights, 2-d convolutions.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/torch.h>

#include <set>

#include "ipj/core/error.hpp"
#include "script_onnx_context.hpp"

namespace ipj::exporter {
namespace {

namespace jit = torch::jit;
using Context = ScriptOnnxContext;
using Node = jit::Node;

// Calls a quantized::* operator of one packed-params argument (unpack, stride, ...) and returns its results.
torch::jit::Stack call_packed(const char* op_name, const c10::IValue& packed) {
  const c10::OperatorHandle op = c10::Dispatcher::singleton().findSchemaOrThrow(op_name, "");
  torch::jit::Stack stack{packed};
  op.callBoxed(stack);
  return stack;
}

// Q then DQ of a float tensor at (scale, zero point) on the uint8 grid: the values a quint8 tensor holds.
std::string fake_quantize(Context& context, const std::string& x, double scale, std::int64_t zero_point) {
  const std::string scale_name = context.scalar(scale);
  const std::string zero_name =
      context.initializer(torch::tensor(static_cast<std::uint8_t>(zero_point), torch::kUInt8));
  const std::string quantized = context.op("QuantizeLinear", {x, scale_name, zero_name});
  return context.op("DequantizeLinear", {quantized, scale_name, zero_name});
}

// DequantizeLinear of a qint8 weight [out, ...], per-tensor or per-channel (axis 0) scales. Written as uint8
// (the int8 values + 128, zero points + 128: the same real values), as the graph IR's QDQ files: with int8
// weights ONNX Runtime picks u8 x s8 kernels that saturate on CPUs without VNNI (docs/EXPORT.md).
std::string dequantized_weight(Context& context, const torch::Tensor& weight) {
  const torch::Tensor values = (weight.int_repr().to(torch::kInt) + 128).to(torch::kByte);
  const auto shifted = [](const torch::Tensor& zero_points) {
    return (zero_points.to(torch::kInt) + 128).to(torch::kByte);
  };
  const bool per_channel =
      weight.qscheme() == torch::kPerChannelAffine || weight.qscheme() == torch::kPerChannelSymmetric;
  if (per_channel && weight.q_per_channel_axis() != 0)
    fail(ErrorCategory::unsupported,
         "an int8 weight quantized along an axis other than 0 has no export here");
  const std::string scale = per_channel ? context.initializer(weight.q_per_channel_scales().to(torch::kFloat))
                                        : context.scalar(weight.q_scale());
  const std::string zero =
      context.initializer(per_channel ? shifted(weight.q_per_channel_zero_points())
                                      : shifted(torch::tensor(weight.q_zero_point(), torch::kLong)));
  onnx::NodeProto& node = context.node("DequantizeLinear", {context.initializer(values), scale, zero});
  if (per_channel) set_attribute(node, "axis", std::int64_t{0});
  return node.output(0);
}

// The op's result, Relu'd when fused, on the output grid (scale = input 2, zero point = input 3).
void bind_requantized(Context& context, const Node* node, std::string y, bool relu) {
  if (relu) y = context.op("Relu", {y});
  const std::string out =
      fake_quantize(context, y, context.number(node->input(2)), context.integer(node->input(3)));
  context.bind(node->output(), Sym::tensor(out));
  context.static_int8 = true;
}

// quantized::conv2d(_relu)(x, packed, scale, zero_point): stride/padding/dilation/groups from the packed
// params.
void quantized_conv2d(Context& context, const Node* node, bool relu) {
  const c10::IValue packed = context.constant(node->input(1));
  const torch::jit::Stack unpacked = call_packed("quantized::conv2d_unpack", packed);  // (weight, bias?)
  const torch::Tensor weight = unpacked.at(0).toTensor();                              // [out, in/g, kh, kw]
  const auto ints = [&](const char* op) { return call_packed(op, packed).at(0).toIntVector(); };
  const std::vector<std::int64_t> stride = ints("quantized::conv2d_stride");
  const std::vector<std::int64_t> padding = ints("quantized::conv2d_padding");
  const std::vector<std::int64_t> dilation = ints("quantized::conv2d_dilation");
  const std::int64_t groups = call_packed("quantized::conv2d_groups", packed).at(0).toInt();
  if (call_packed("quantized::conv2d_transpose", packed).at(0).toInt() != 0)
    context.refuse(node, "(a transposed int8 convolution)");
  std::vector<std::string> inputs{context.tensor(node->input(0)), dequantized_weight(context, weight)};
  if (unpacked.at(1).isTensor() && unpacked.at(1).toTensor().defined())
    inputs.push_back(context.initializer(unpacked.at(1).toTensor().to(torch::kFloat)));
  onnx::NodeProto& conv = context.node("Conv", inputs);
  set_attribute(conv, "kernel_shape",
                std::vector<std::int64_t>(weight.sizes().begin() + 2, weight.sizes().end()));
  set_attribute(conv, "strides", stride);
  std::vector<std::int64_t> pads = padding;
  pads.insert(pads.end(), padding.begin(), padding.end());
  set_attribute(conv, "pads", pads);
  set_attribute(conv, "dilations", dilation);
  set_attribute(conv, "group", groups);
  bind_requantized(context, node, conv.output(0), relu);
}

// quantized::linear(_relu)(x, packed, scale, zero_point): x @ W^T + b on any rank.
void quantized_linear(Context& context, const Node* node, bool relu) {
  const torch::jit::Stack unpacked =
      call_packed("quantized::linear_unpack", context.constant(node->input(1)));
  const std::string weight = dequantized_weight(context, unpacked.at(0).toTensor());  // [out, in]
  onnx::NodeProto& transpose = context.node("Transpose", {weight});
  set_attribute(transpose, "perm", std::vector<std::int64_t>{1, 0});
  std::string y = context.op("MatMul", {context.tensor(node->input(0)), transpose.output(0)});
  if (unpacked.at(1).isTensor() && unpacked.at(1).toTensor().defined())
    y = context.op("Add", {y, context.initializer(unpacked.at(1).toTensor().to(torch::kFloat))});
  bind_requantized(context, node, y, relu);
}

}  // namespace

void requantize_rounding_output(Context& context, const Node* node) {
  static const std::set<std::string> rounding{"aten::avg_pool2d", "aten::adaptive_avg_pool2d", "aten::mean",
                                              "aten::upsample_bilinear2d", "aten::upsample_nearest2d"};
  if (node->outputs().size() != 1 || rounding.count(node->kind().toQualString()) == 0) return;
  const auto found = context.quantized_params.find(node->output());
  if (found == context.quantized_params.end()) return;
  const auto [scale, zero_point] = found->second;
  context.bind(node->output(),
               Sym::tensor(fake_quantize(context, context.tensor(node->output()), scale, zero_point)));
}

void add_quantized_op_converters(ScriptOpTable& table) {
  table["aten::quantize_per_tensor"] = [](Context& context, const Node* node) {
    context.bind(node->output(),
                 Sym::tensor(fake_quantize(context, context.tensor(node->input(0)),
                                           context.number(node->input(1)), context.integer(node->input(2)))));
    context.static_int8 = true;
  };
  table["aten::dequantize"] = [](Context& context, const Node* node) {
    context.bind(node->output(), Sym::tensor(context.tensor(node->input(0))));
  };
  table["quantized::conv2d"] = [](Context& context, const Node* node) {
    quantized_conv2d(context, node, false);
  };
  table["quantized::conv2d_relu"] = [](Context& context, const Node* node) {
    quantized_conv2d(context, node, true);
  };
  table["quantized::linear"] = [](Context& context, const Node* node) {
    quantized_linear(context, node, false);
  };
  table["quantized::linear_relu"] = [](Context& context, const Node* node) {
    quantized_linear(context, node, true);
  };
  for (const char* name : {"quantized::add", "quantized::add_relu"})
    table[name] = [](Context& context, const Node* node) {
      const std::string sum =
          context.op("Add", {context.tensor(node->input(0)), context.tensor(node->input(1))});
      bind_requantized(context, node, sum, node->kind().toQualString() == std::string("quantized::add_relu"));
    };
}

}  // namespace ipj::exporter
