// Direct TorchScript -> ONNX: layers (linear, convolution, normalisations, pools, reductions, the fused
// multi-head attention of nn.MultiheadAttention's inference path and nn.TransformerEncoderLayer's fused
// one, dynamic int8 linear layers). Weights are
// constants of the frozen module and become initializers. Limits: no transposed convolutions, no attention
// masks, adaptive pooling only to sizes that divide the input.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/torch.h>

#include <array>
#include <cmath>

#include "ipj/core/error.hpp"
#include "script_onnx_context.hpp"

namespace ipj::exporter {
namespace {

namespace jit = torch::jit;
using Context = ScriptOnnxContext;
using Node = jit::Node;

bool none_value(const Context& context, const jit::Value* value) {
  return context.is_constant(value) && context.constant(value).isNone();
}

void bind_output(Context& context, const Node* node, const std::string& name) {
  context.bind(node->output(), Sym::tensor(name));
}

// x @ weight^T (+ bias) for x of any rank; a constant weight is transposed here.
std::string linear_of(Context& context, const std::string& x, const jit::Value* weight,
                      const jit::Value* bias) {
  std::string transposed;
  if (context.is_constant(weight)) {
    transposed = context.initializer(context.constant(weight).toTensor().to(torch::kFloat).t().contiguous());
  } else {
    onnx::NodeProto& transpose = context.node("Transpose", {context.tensor(weight)});
    set_attribute(transpose, "perm", std::vector<std::int64_t>{1, 0});
    transposed = transpose.output(0);
  }
  std::string y = context.op("MatMul", {x, transposed});
  if (bias != nullptr && !none_value(context, bias)) y = context.op("Add", {y, context.tensor(bias)});
  return y;
}

std::vector<std::int64_t> repeated(std::vector<std::int64_t> values, std::size_t count) {
  if (values.size() == 1) values.assign(count, values[0]);
  return values;
}

std::vector<std::int64_t> onnx_pads(const std::vector<std::int64_t>& padding) {  // begins then ends
  std::vector<std::int64_t> pads = padding;
  pads.insert(pads.end(), padding.begin(), padding.end());
  return pads;
}

// conv(x, w, b, stride, padding, dilation, groups) with `padding` ints or "same"/"valid".
void convolution(Context& context, const Node* node, const jit::Value* padding_value, std::int64_t groups) {
  const torch::Tensor weight = context.constant(node->input(1)).toTensor();
  const std::size_t spatial = static_cast<std::size_t>(weight.dim() - 2);
  const std::vector<std::int64_t> kernel(weight.sizes().begin() + 2, weight.sizes().end());
  const std::vector<std::int64_t> stride = repeated(context.ints(node->input(3)), spatial);
  const std::vector<std::int64_t> dilation = repeated(context.ints(node->input(5)), spatial);
  std::vector<std::int64_t> pads;
  const c10::IValue padding = context.constant(padding_value);
  if (padding.isString()) {
    std::vector<std::int64_t> begins(spatial, 0), ends(spatial, 0);
    if (padding.toStringRef() == "same")
      for (std::size_t index = 0; index < spatial; ++index) {
        const std::int64_t total = dilation[index] * (kernel[index] - 1);
        begins[index] = total / 2;
        ends[index] = total - total / 2;
      }
    pads = begins;
    pads.insert(pads.end(), ends.begin(), ends.end());
  } else {
    pads = onnx_pads(repeated(padding.toIntVector(), spatial));
  }
  std::vector<std::string> inputs{context.tensor(node->input(0)), context.tensor(node->input(1))};
  if (!none_value(context, node->input(2))) inputs.push_back(context.tensor(node->input(2)));
  onnx::NodeProto& conv = context.node("Conv", inputs);
  set_attribute(conv, "kernel_shape", kernel);
  set_attribute(conv, "strides", stride);
  set_attribute(conv, "pads", pads);
  set_attribute(conv, "dilations", dilation);
  set_attribute(conv, "group", groups);
  bind_output(context, node, conv.output(0));
}

// (x - mean) / sqrt(var + eps) over `axes` (kept dims).
std::string normalize_over(Context& context, const std::string& x, const std::vector<std::int64_t>& axes,
                           double eps) {
  onnx::NodeProto& mean = context.node("ReduceMean", {x});
  set_attribute(mean, "axes", axes);
  const std::string centered = context.op("Sub", {x, mean.output(0)});
  onnx::NodeProto& variance = context.node("ReduceMean", {context.op("Mul", {centered, centered})});
  set_attribute(variance, "axes", axes);
  const std::string deviation =
      context.op("Sqrt", {context.op("Add", {variance.output(0), context.scalar(eps)})});
  return context.op("Div", {centered, deviation});
}

// x normalized over its last `count` dims, times `scale`, plus `bias` ("": none): LayerNormalization from
// opset 17, ReduceMean arithmetic below.
std::string layer_norm_of(Context& context, const std::string& x, std::int64_t count,
                          const std::string& scale, const std::string& bias, double eps) {
  if (context.opset >= 17) {
    std::vector<std::string> inputs{x, scale};
    if (!bias.empty()) inputs.push_back(bias);
    onnx::NodeProto& norm = context.node("LayerNormalization", inputs);
    set_attribute(norm, "axis", -count);
    set_attribute(norm, "epsilon", static_cast<float>(eps));
    return norm.output(0);
  }
  std::vector<std::int64_t> axes;
  for (std::int64_t axis = -count; axis < 0; ++axis)
    axes.push_back(axis);
  std::string y = context.op("Mul", {normalize_over(context, x, axes, eps), scale});
  return bias.empty() ? y : context.op("Add", {y, bias});
}

void layer_norm(Context& context, const Node* node) {
  const std::vector<std::int64_t> normalized = context.ints(node->input(1));
  const std::string scale = none_value(context, node->input(2)) ? context.initializer(torch::ones(normalized))
                                                                : context.tensor(node->input(2));
  const std::string bias = none_value(context, node->input(3)) ? "" : context.tensor(node->input(3));
  bind_output(
      context, node,
      layer_norm_of(context, context.tensor(node->input(0)), static_cast<std::int64_t>(normalized.size()),
                    scale, bias, context.number(node->input(4))));
}

// group_norm(x, groups, weight, bias, eps): [N, G, -1] statistics, back to x's shape, per-channel affine.
void group_norm(Context& context, const Node* node) {
  const jit::Value* x = node->input(0);
  const std::vector<std::int64_t> shape = context.shape(x);
  const std::int64_t groups = context.integer(node->input(1));
  const std::string input = context.tensor(x);
  const std::string grouped = context.op("Reshape", {input, context.int64s({0, groups, -1})});
  const std::string normalized = normalize_over(context, grouped, {2}, context.number(node->input(4)));
  std::string y = context.op("Reshape", {normalized, context.op("Shape", {input})});
  std::vector<std::int64_t> affine_shape(shape.size() - 1, 1);
  affine_shape[0] = shape.at(1);  // [C, 1, ...]
  if (!none_value(context, node->input(2)))
    y = context.op(
        "Mul", {y, context.initializer(
                       context.constant(node->input(2)).toTensor().to(torch::kFloat).reshape(affine_shape))});
  if (!none_value(context, node->input(3)))
    y = context.op(
        "Add", {y, context.initializer(
                       context.constant(node->input(3)).toTensor().to(torch::kFloat).reshape(affine_shape))});
  bind_output(context, node, y);
}

void batch_norm(Context& context, const Node* node) {
  const std::int64_t channels = context.shape(node->input(0)).at(1);
  auto affine = [&](const jit::Value* value, float fill) {
    return none_value(context, value) ? context.initializer(torch::full({channels}, fill))
                                      : context.tensor(value);
  };
  onnx::NodeProto& norm =
      context.node("BatchNormalization", {context.tensor(node->input(0)), affine(node->input(1), 1.0f),
                                          affine(node->input(2), 0.0f), context.tensor(node->input(3)),
                                          context.tensor(node->input(4))});
  set_attribute(norm, "epsilon", static_cast<float>(context.number(node->input(7))));
  bind_output(context, node, norm.output(0));
}

// max_pool2d(x, kernel, stride, padding, dilation, ceil) / avg_pool2d(x, kernel, stride, padding, ceil,
// count_include_pad, divisor_override).
void pool(Context& context, const Node* node, bool max) {
  const std::vector<std::int64_t> kernel = repeated(context.ints(node->input(1)), 2);
  std::vector<std::int64_t> stride = context.ints(node->input(2));
  stride = stride.empty() ? kernel : repeated(stride, 2);
  const std::vector<std::int64_t> padding = repeated(context.ints(node->input(3)), 2);
  onnx::NodeProto& pooled = context.node(max ? "MaxPool" : "AveragePool", {context.tensor(node->input(0))});
  set_attribute(pooled, "kernel_shape", kernel);
  set_attribute(pooled, "strides", stride);
  set_attribute(pooled, "pads", onnx_pads(padding));
  if (max) {
    set_attribute(pooled, "dilations", repeated(context.ints(node->input(4)), 2));
    set_attribute(pooled, "ceil_mode", std::int64_t{context.constant(node->input(5)).toBool() ? 1 : 0});
  } else {
    if (!none_value(context, node->input(6))) context.refuse(node, "with divisor_override");
    set_attribute(pooled, "ceil_mode", std::int64_t{context.constant(node->input(4)).toBool() ? 1 : 0});
    set_attribute(pooled, "count_include_pad",
                  std::int64_t{context.constant(node->input(5)).toBool() ? 1 : 0});
  }
  bind_output(context, node, pooled.output(0));
}

void adaptive_avg_pool(Context& context, const Node* node) {
  const std::vector<std::int64_t> shape = context.shape(node->input(0));  // [N, C, H, W]
  const std::vector<std::int64_t> output = repeated(context.ints(node->input(1)), 2);
  if (output == std::vector<std::int64_t>{1, 1})
    return bind_output(context, node, context.op("GlobalAveragePool", {context.tensor(node->input(0))}));
  const std::int64_t height = shape.at(2), width = shape.at(3);
  if (height % output[0] != 0 || width % output[1] != 0)
    context.refuse(node, "to " + std::to_string(output[0]) + "x" + std::to_string(output[1]) + " from " +
                             std::to_string(height) + "x" + std::to_string(width) +
                             " (no fixed ONNX pooling; use an input size that the output size divides)");
  const std::vector<std::int64_t> kernel{height / output[0], width / output[1]};
  onnx::NodeProto& pooled = context.node("AveragePool", {context.tensor(node->input(0))});
  set_attribute(pooled, "kernel_shape", kernel);
  set_attribute(pooled, "strides", kernel);
  bind_output(context, node, pooled.output(0));
}

// mean/sum(x, dims?, keepdim, dtype): all dims when dims is None or empty.
void reduce(Context& context, const Node* node, bool sum) {
  const jit::Value* x = node->input(0);
  std::vector<std::int64_t> axes;
  bool keep = false;
  if (node->inputs().size() >= 3) {
    if (!none_value(context, node->input(1))) axes = context.ints(node->input(1));
    keep = context.constant(node->input(2)).toBool();
  }
  if (node->inputs().size() >= 2 && !none_value(context, node->inputs().back()) &&
      context.constant(node->inputs().back()).isInt())
    context.refuse(node, "with a dtype argument");
  for (std::int64_t& axis : axes)
    axis = context.dim(x, axis);
  if (axes.empty())
    for (std::int64_t axis = 0; axis < context.rank(x); ++axis)
      axes.push_back(axis);
  onnx::NodeProto& reduced = sum ? context.node("ReduceSum", {context.tensor(x), context.int64s(axes)})
                                 : context.node("ReduceMean", {context.tensor(x)});
  if (!sum) set_attribute(reduced, "axes", axes);
  set_attribute(reduced, "keepdims", std::int64_t{keep ? 1 : 0});
  bind_output(context, node, reduced.output(0));
}

// The attention of a fused multi-head attention op on [N, L, E] inputs (ONNX names of q, k, v), its packed
// in-projection (weight [3E, E], bias [3E] at node inputs `weight_input`, +1): softmax(q k^T / sqrt(d)) v,
// heads merged back to [N, L, E], before the output projection.
std::string attention_of(Context& context, const Node* node, const std::array<std::string, 3>& qkv,
                         std::size_t weight_input, std::int64_t embed, std::int64_t heads) {
  const std::int64_t head_dim = embed / heads;
  const torch::Tensor weight = context.constant(node->input(weight_input)).toTensor().to(torch::kFloat);
  const torch::Tensor bias = context.constant(node->input(weight_input + 1)).toTensor().to(torch::kFloat);
  auto project = [&](int which, const std::vector<std::int64_t>& perm) {
    const std::string& x = qkv[static_cast<std::size_t>(which)];
    const torch::Tensor w = weight.slice(0, which * embed, (which + 1) * embed);
    const torch::Tensor b = bias.slice(0, which * embed, (which + 1) * embed);
    std::string y = context.op("MatMul", {x, context.initializer(w.t().contiguous())});
    y = context.op("Add", {y, context.initializer(b.contiguous())});
    y = context.op("Reshape", {y, context.int64s({0, -1, heads, head_dim})});
    onnx::NodeProto& transpose = context.node("Transpose", {y});
    set_attribute(transpose, "perm", perm);
    return transpose.output(0);
  };
  const std::string q = project(0, {0, 2, 1, 3});  // [N, H, L, d]
  const std::string k = project(1, {0, 2, 3, 1});  // [N, H, d, S]
  const std::string v = project(2, {0, 2, 1, 3});  // [N, H, S, d]
  std::string scores = context.op("MatMul", {q, k});
  scores = context.op("Mul", {scores, context.scalar(1.0 / std::sqrt(static_cast<double>(head_dim)))});
  onnx::NodeProto& softmax = context.node("Softmax", {scores});
  set_attribute(softmax, "axis", std::int64_t{-1});
  onnx::NodeProto& merged = context.node("Transpose", {context.op("MatMul", {softmax.output(0), v})});
  set_attribute(merged, "perm", std::vector<std::int64_t>{0, 2, 1, 3});
  return context.op("Reshape", {merged.output(0), context.int64s({0, -1, embed})});
}

// aten::_native_multi_head_attention(q, k, v, embed_dim, heads, qkv_weight, qkv_bias, proj_weight,
// proj_bias, mask, need_weights, ...) on [N, L, E]: projections, softmax(q k^T / sqrt(d)) v, output proj.
void native_attention(Context& context, const Node* node) {
  if (!none_value(context, node->input(9))) context.refuse(node, "with an attention mask");
  if (context.constant(node->input(10)).toBool())
    context.refuse(node, "with need_weights=True (the attention weights as an output)");
  if (context.rank(node->input(0)) != 3) context.refuse(node, "on unbatched input");
  const std::array<std::string, 3> qkv{context.tensor(node->input(0)), context.tensor(node->input(1)),
                                       context.tensor(node->input(2))};
  const std::string attended =
      attention_of(context, node, qkv, 5, context.integer(node->input(3)), context.integer(node->input(4)));
  context.bind(node->output(0), Sym::tensor(linear_of(context, attended, node->input(7), node->input(8))));
  if (node->outputs().size() > 1) context.bind(node->output(1), Sym::constant(c10::IValue()));
}

// aten::_transformer_encoder_layer_fwd(src, embed_dim, heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
// use_gelu, norm_first, eps, norm1 weight, bias, norm2 weight, bias, ffn1 weight, bias, ffn2 weight, bias,
// mask, ...): nn.TransformerEncoderLayer's inference fast path on [N, L, E] (batch_first), as PyTorch
// computes it: x + attention(x) then x + ffn(x), each with its layer norm after (or, norm_first, before).
void encoder_layer(Context& context, const Node* node) {
  if (node->inputs().size() > 18 && !none_value(context, node->input(18)))
    context.refuse(node, "with an attention mask");
  if (context.rank(node->input(0)) != 3) context.refuse(node, "on unbatched input");
  const bool norm_first = context.constant(node->input(8)).toBool();
  const double eps = context.number(node->input(9));
  const auto norm = [&](const std::string& x, std::size_t weight) {
    return layer_norm_of(context, x, 1, context.tensor(node->input(weight)),
                         context.tensor(node->input(weight + 1)), eps);
  };
  const std::string src = context.tensor(node->input(0));
  const std::string normed = norm_first ? norm(src, 10) : src;
  const std::string attended = attention_of(context, node, {normed, normed, normed}, 3,
                                            context.integer(node->input(1)), context.integer(node->input(2)));
  std::string x = context.op("Add", {src, linear_of(context, attended, node->input(5), node->input(6))});
  if (!norm_first) x = norm(x, 10);
  std::string hidden = linear_of(context, norm_first ? norm(x, 12) : x, node->input(14), node->input(15));
  hidden = context.constant(node->input(7)).toBool() ? gelu_of(context, hidden, false)
                                                     : context.op("Relu", {hidden});
  x = context.op("Add", {x, linear_of(context, hidden, node->input(16), node->input(17))});
  bind_output(context, node, norm_first ? x : norm(x, 12));
}

// x quantized per tensor to uint8 [0, levels] over its range with 0 (PyTorch's ChooseQuantizationParams:
// scale (max - min) / levels, zero point round(-min / scale)) and dequantized. 255 levels is ONNX's
// DynamicQuantizeLinear; reduce_range (127) is written out.
std::string dynamic_quantized(Context& context, const std::string& x, int levels) {
  if (levels == 255) {
    onnx::NodeProto& quantize = context.node("DynamicQuantizeLinear", {x}, 3);
    return context.op("DequantizeLinear", {quantize.output(0), quantize.output(1), quantize.output(2)});
  }
  onnx::NodeProto& low = context.node("ReduceMin", {x});
  set_attribute(low, "keepdims", std::int64_t{0});
  onnx::NodeProto& high = context.node("ReduceMax", {x});
  set_attribute(high, "keepdims", std::int64_t{0});
  const std::string zero = context.scalar(0.0);
  const std::string minimum = context.op("Min", {low.output(0), zero});
  const std::string maximum = context.op("Max", {high.output(0), zero});
  std::string scale =
      context.op("Div", {context.op("Sub", {maximum, minimum}), context.scalar(static_cast<double>(levels))});
  scale = context.op("Max", {scale, context.scalar(1e-30)});  // an all-zero input stays zero
  const std::string shift = context.op("Round", {context.op("Neg", {context.op("Div", {minimum, scale})})});
  onnx::NodeProto& zero_point =
      context.node("Cast", {context.op("Clip", {shift, zero, context.scalar(static_cast<double>(levels))})});
  set_attribute(zero_point, "to", static_cast<std::int64_t>(onnx::TensorProto::UINT8));
  const std::string quantized = context.op("QuantizeLinear", {x, scale, zero_point.output(0)});
  return context.op("DequantizeLinear", {quantized, scale, zero_point.output(0)});
}

// quantized::linear_dynamic(x, packed, reduce_range): the input quantized per batch (DynamicQuantizeLinear,
// uint8 over its range with 0), the int8 weight dequantized to float.
void linear_dynamic(Context& context, const Node* node) {
  static const c10::OperatorHandle unpack =
      c10::Dispatcher::singleton().findSchemaOrThrow("quantized::linear_unpack", "");
  torch::jit::Stack stack{context.constant(node->input(1))};
  unpack.callBoxed(stack);                                           // (Tensor weight, Tensor? bias)
  const torch::Tensor weight = stack.at(0).toTensor().dequantize();  // [out, in]
  const c10::IValue bias = stack.at(1);
  const std::string x = dynamic_quantized(context, context.tensor(node->input(0)),
                                          context.constant(node->input(2)).toBool() ? 127 : 255);
  std::string y = context.op("MatMul", {x, context.initializer(weight.t().contiguous())});
  if (bias.isTensor() && bias.toTensor().defined())
    y = context.op("Add", {y, context.initializer(bias.toTensor().to(torch::kFloat))});
  context.dynamic_int8 = true;
  bind_output(context, node, y);
}

}  // namespace

void add_layer_op_converters(ScriptOpTable& table) {
  table["aten::linear"] = [](Context& context, const Node* node) {
    bind_output(context, node,
                linear_of(context, context.tensor(node->input(0)), node->input(1), node->input(2)));
  };
  table["aten::addmm"] = [](Context& context, const Node* node) {  // beta * bias + alpha * (a @ b)
    onnx::NodeProto& gemm = context.node(
        "Gemm",
        {context.tensor(node->input(1)), context.tensor(node->input(2)), context.tensor(node->input(0))});
    set_attribute(gemm, "beta", static_cast<float>(context.number(node->input(3))));
    set_attribute(gemm, "alpha", static_cast<float>(context.number(node->input(4))));
    bind_output(context, node, gemm.output(0));
  };
  table["aten::baddbmm"] = [](Context& context, const Node* node) {
    std::string product =
        context.op("MatMul", {context.tensor(node->input(1)), context.tensor(node->input(2))});
    product = context.op("Mul", {product, context.scalar(context.number(node->input(4)))});
    const std::string base =
        context.op("Mul", {context.tensor(node->input(0)), context.scalar(context.number(node->input(3)))});
    bind_output(context, node, context.op("Add", {base, product}));
  };
  for (const char* name : {"aten::conv1d", "aten::conv2d"})
    table[name] = [](Context& context, const Node* node) {
      convolution(context, node, node->input(4), context.integer(node->input(6)));
    };
  table["aten::_convolution"] = [](Context& context, const Node* node) {
    if (context.constant(node->input(6)).toBool()) context.refuse(node, "(a transposed convolution)");
    convolution(context, node, node->input(4), context.integer(node->input(8)));
  };
  table["aten::layer_norm"] = layer_norm;
  table["aten::group_norm"] = group_norm;
  table["aten::batch_norm"] = batch_norm;
  table["aten::max_pool2d"] = [](Context& context, const Node* node) { pool(context, node, true); };
  table["aten::avg_pool2d"] = [](Context& context, const Node* node) { pool(context, node, false); };
  table["aten::adaptive_avg_pool2d"] = adaptive_avg_pool;
  table["aten::mean"] = [](Context& context, const Node* node) { reduce(context, node, false); };
  table["aten::sum"] = [](Context& context, const Node* node) { reduce(context, node, true); };
  table["aten::_native_multi_head_attention"] = native_attention;
  table["aten::_transformer_encoder_layer_fwd"] = encoder_layer;
  table["quantized::linear_dynamic"] = linear_dynamic;
}

}  // namespace ipj::exporter
