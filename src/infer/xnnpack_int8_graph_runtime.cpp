// A static (or QAT) int8 graph (QuantizedGraph: any architecture the importer takes) as one XNNPACK
// subgraph runtime in signed 8 bits: conv2d (grouped, depthwise, dilated; taps that only read padding cut),
// linear, residual adds, clamps, max pools, global average pools, flatten, and float logits at the end as
// QuantizedGraph computes them. Limits: one batch size; average pools with windows (XNNPACK has no int8
// one here), dynamic int8 and nodes XNNPACK refuses are refused naming the node.
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <utility>
#include <vector>

#include "ipj/core/error.hpp"
#include "ipj/infer/xnnpack_runtime.hpp"
#include "ipj/quant/quantized_graph.hpp"
#include "xnnpack_int8_subgraph.hpp"

namespace ipj::infer {

#ifdef IPJ_WITH_XNNPACK  // else xnnpack_runtime.cpp says how to get it

namespace {

using xnnpack::check_int8;
using xnnpack::Int8Subgraph;
using xnnpack::Int8Value;
using xnnpack::Shape;

std::string node_text(const quant::GraphNode& node) {
  return "node '" + node.name + "' (" + quant::node_kind_name(node.kind) + ")";
}

[[noreturn]] void refuse(const quant::GraphNode& node, const std::string& why) {
  fail(ErrorCategory::unsupported, "XNNPACK int8 runtime: " + node_text(node) + " " + why);
}

// The node's activation as an output range in real units (XNNPACK needs min < max).
std::pair<float, float> activation_range(const quant::GraphNode& node) {
  constexpr float inf = std::numeric_limits<float>::infinity();
  std::pair<float, float> range{-inf, inf};
  if (node.activation.kind == quant::ActivationKind::relu) range.first = 0.0f;
  if (node.activation.kind == quant::ActivationKind::clamp)
    range = {static_cast<float>(node.activation.min), static_cast<float>(node.activation.max)};
  if (!(range.first < range.second)) refuse(node, "clamps to an empty range");
  return range;
}

struct GraphBuild {
  const quant::QuantizedGraph& int8;
  const std::vector<Shape>& shapes;
  Int8Subgraph& subgraph;
  std::vector<Int8Value> values;  // per node
};

const Int8Value& four_d_input(const GraphBuild& build, const quant::GraphNode& node) {
  const Int8Value& input = build.values[node.inputs.at(0)];
  if (input.aten_shape.size() != 4 || !input.flattened_chw.empty())
    refuse(node, "reads a value that is not [N, C, H, W]");
  return input;
}

void define_conv2d(GraphBuild& build, std::size_t index, const Int8Value& output) {
  const quant::GraphNode& node = build.int8.graph().nodes[index];
  const Int8Value& input = four_d_input(build, node);
  const Shape &in = input.aten_shape, &out = output.aten_shape;
  auto [weight, scales] = build.int8.kernel_weight(index);  // int8 [O, I/g, kh, kw], double [O]
  const xnnpack::AxisTaps rows =
      xnnpack::axis_taps(in[2], out[2], weight.size(2), node.stride[0], node.padding[0], node.dilation[0]);
  const xnnpack::AxisTaps columns =
      xnnpack::axis_taps(in[3], out[3], weight.size(3), node.stride[1], node.padding[1], node.dilation[1]);
  xnnpack::Int8Convolution convolution;
  convolution.weight = weight.narrow(2, rows.first, rows.count).narrow(3, columns.first, columns.count);
  convolution.scales = scales;
  convolution.bias = node.bias;
  convolution.stride = node.stride;
  convolution.dilation = node.dilation;
  convolution.pad_top = rows.pad_before;
  convolution.pad_bottom = rows.pad_after;
  convolution.pad_left = columns.pad_before;
  convolution.pad_right = columns.pad_after;
  convolution.groups = node.groups;
  std::tie(convolution.low, convolution.high) = activation_range(node);
  xnnpack::define_int8_convolution(build.subgraph, convolution, input, output, node_text(node));
}

// The logits in float, as QuantizedGraph computes them: the dequantized input times the stored int8 weights
// dequantized (8 bits, not the kernels' 7-bit form), plus the bias; external output 1.
void define_float_logits(GraphBuild& build, std::size_t index) {
  const quant::GraphNode& node = build.int8.graph().nodes[index];
  const Int8Value& input = build.values[node.inputs.at(0)];
  if (input.aten_shape.size() != 2) refuse(node, "reads a value that is not [N, features]");
  torch::Tensor weight = build.int8.weight_int8()[index].to(torch::kFloat) *
                         build.int8.weight_scale()[index].to(torch::kFloat).unsqueeze(1);  // [O, I]
  if (!input.flattened_chw.empty()) {
    const Shape& chw = input.flattened_chw;
    weight = weight.view({weight.size(0), chw[0], chw[1], chw[2]})
                 .permute({0, 2, 3, 1})
                 .reshape({weight.size(0), -1});
  }
  weight = weight.contiguous();
  const torch::Tensor bias = node.bias.to(torch::kFloat).contiguous();
  build.subgraph.weights.insert(build.subgraph.weights.end(), {weight, bias});
  xnn_subgraph_t handle = build.subgraph.handle;
  const std::string where = node_text(node);
  const std::vector<std::size_t> input_dims = xnnpack::int8_dims(input.aten_shape);
  const std::vector<std::size_t> weight_dims(weight.sizes().begin(), weight.sizes().end());
  const std::size_t bias_dims[1] = {static_cast<std::size_t>(weight.size(0))};
  const std::vector<std::size_t> output_dims = xnnpack::xnn_dims(build.shapes[index]);
  std::uint32_t dequantized = XNN_INVALID_VALUE_ID, weight_id = XNN_INVALID_VALUE_ID,
                bias_id = XNN_INVALID_VALUE_ID, output_id = XNN_INVALID_VALUE_ID;
  check_int8(xnn_define_tensor_value(handle, xnn_datatype_fp32, input_dims.size(), input_dims.data(), nullptr,
                                     XNN_INVALID_VALUE_ID, 0, &dequantized),
             where, "float value");
  check_int8(xnn_define_convert(handle, input.id, dequantized, 0), where, "dequantize");
  check_int8(xnn_define_tensor_value(handle, xnn_datatype_fp32, 2, weight_dims.data(),
                                     weight.data_ptr<float>(), XNN_INVALID_VALUE_ID, 0, &weight_id),
             where, "float weights");
  check_int8(xnn_define_tensor_value(handle, xnn_datatype_fp32, 1, bias_dims, bias.data_ptr<float>(),
                                     XNN_INVALID_VALUE_ID, 0, &bias_id),
             where, "float biases");
  check_int8(xnn_define_tensor_value(handle, xnn_datatype_fp32, output_dims.size(), output_dims.data(),
                                     nullptr, 1, XNN_VALUE_FLAG_EXTERNAL_OUTPUT, &output_id),
             where, "output value");
  const auto [low, high] = activation_range(node);
  check_int8(xnn_define_fully_connected(handle, low, high, dequantized, weight_id, bias_id, output_id, 0),
             where, "fully connected layer");
}

void define_pool(GraphBuild& build, std::size_t index, const Int8Value& output) {
  const quant::GraphNode& node = build.int8.graph().nodes[index];
  const Int8Value& input = four_d_input(build, node);
  const Shape &in = input.aten_shape, &out = output.aten_shape;
  const auto u32 = [](std::int64_t value) { return static_cast<std::uint32_t>(value); };
  if (node.kind == quant::NodeKind::adaptive_avg_pool2d) {
    if (out[2] != 1 || out[3] != 1)
      refuse(node, "pools to more than 1x1 (XNNPACK has no int8 average pooling)");
    check_int8(xnn_define_global_average_pooling_2d(build.subgraph.handle, -INFINITY, INFINITY, input.id,
                                                    output.id, 0),
               node_text(node), "global average pooling");
    return;
  }
  if (node.kind != quant::NodeKind::max_pool2d)
    refuse(node, "is an average pool (XNNPACK has no int8 one here)");
  const std::uint32_t extra_h =
      xnnpack::ceil_padding(in[2], out[2], node.kernel[0], node.stride[0], node.padding[0], node.dilation[0]);
  const std::uint32_t extra_w =
      xnnpack::ceil_padding(in[3], out[3], node.kernel[1], node.stride[1], node.padding[1], node.dilation[1]);
  check_int8(xnn_define_max_pooling_2d(build.subgraph.handle, u32(node.padding[0]),
                                       u32(node.padding[1]) + extra_w, u32(node.padding[0]) + extra_h,
                                       u32(node.padding[1]), u32(node.kernel[0]), u32(node.kernel[1]),
                                       u32(node.stride[0]), u32(node.stride[1]), u32(node.dilation[0]),
                                       u32(node.dilation[1]), -INFINITY, INFINITY, input.id, output.id, 0),
             node_text(node), "max pooling");
}

// Node `index` as a new qint8 value: its own parameters after conv2d/linear/add, its input's otherwise.
void define_node(GraphBuild& build, std::size_t index) {
  const quant::GraphNode& node = build.int8.graph().nodes[index];
  const Int8Value& first_input = build.values[node.inputs.at(0)];
  Int8Value& value = build.values[index];
  value.aten_shape = build.shapes[index];
  const bool own_params = quant::has_weights(node) || node.kind == quant::NodeKind::add;
  value.params = own_params ? build.int8.params()[index] : first_input.params;
  if (!own_params && node.kind != quant::NodeKind::clamp &&
      node.activation.kind != quant::ActivationKind::none)
    refuse(node, "has an activation");
  value.id = xnnpack::define_int8_value(build.subgraph, value.aten_shape, value.params, node_text(node));
  const auto [low, high] = activation_range(node);
  switch (node.kind) {
    case quant::NodeKind::conv2d:
      return define_conv2d(build, index, value);
    case quant::NodeKind::linear: {
      xnnpack::Int8Convolution linear;
      std::tie(linear.weight, linear.scales) = build.int8.kernel_weight(index);
      linear.bias = node.bias;
      std::tie(linear.low, linear.high) = std::pair{low, high};
      return xnnpack::define_int8_convolution(build.subgraph, linear, first_input, value, node_text(node));
    }
    case quant::NodeKind::add: {
      const Int8Value& other = build.values[node.inputs.at(1)];
      if (first_input.aten_shape != value.aten_shape || other.aten_shape != value.aten_shape ||
          first_input.flattened_chw != other.flattened_chw)
        refuse(node, "adds values of different shapes or layouts");
      value.flattened_chw = first_input.flattened_chw;
      return check_int8(
          xnn_define_add2(build.subgraph.handle, low, high, first_input.id, other.id, value.id, 0),
          node_text(node), "addition");
    }
    case quant::NodeKind::clamp:
      value.flattened_chw = first_input.flattened_chw;
      return check_int8(xnn_define_clamp(build.subgraph.handle, low, high, first_input.id, value.id, 0),
                        node_text(node), "clamp");
    case quant::NodeKind::max_pool2d:
    case quant::NodeKind::avg_pool2d:
    case quant::NodeKind::adaptive_avg_pool2d:
      return define_pool(build, index, value);
    case quant::NodeKind::flatten: {
      const Shape& in = first_input.aten_shape;
      if (in.size() == 4 && in[2] * in[3] > 1) value.flattened_chw = {in[1], in[2], in[3]};
      if (in.size() == 2) value.flattened_chw = first_input.flattened_chw;
      const std::vector<std::size_t> dims = xnnpack::int8_dims(value.aten_shape);
      return check_int8(xnn_define_static_reshape(build.subgraph.handle, dims.size(), dims.data(),
                                                  first_input.id, value.id, 0),
                        node_text(node), "reshape");
    }
    case quant::NodeKind::input:
      refuse(node, "is an input after node 0");
  }
}

// The float graph with zero weights where int8 replaced them: what node_shapes runs to size every value.
quant::Graph shape_graph(const quant::QuantizedGraph& int8) {
  quant::Graph graph = int8.graph();
  for (std::size_t index = 0; index < graph.nodes.size(); ++index) {
    quant::GraphNode& node = graph.nodes[index];
    if (!quant::has_weights(node) || node.weight.defined()) continue;
    node.weight = torch::zeros(int8.weight_int8()[index].sizes());
    if (!node.bias.defined()) node.bias = torch::zeros({node.weight.size(0)});
  }
  return graph;
}

// Prepared input (fp32, external 0) -> qint8 with node 0's parameters -> the nodes -> fp32 (external 1).
void build_graph_subgraph(GraphBuild& build) {
  const quant::Graph& graph = build.int8.graph();
  const std::vector<bool> live = xnnpack::live_nodes(graph);
  build.values.resize(graph.nodes.size());
  build.values[0] = xnnpack::define_int8_input(build.subgraph, build.shapes[0], build.int8.params()[0]);
  const std::size_t last = graph.nodes.size() - 1;
  const bool float_logits = quant::keeps_float_logits(graph, last);
  for (std::size_t index = 1; index <= last; ++index) {
    if (!live[index]) continue;
    if (build.shapes[index].size() != 4 && build.shapes[index].size() != 2)
      refuse(graph.nodes[index], "has an output that is neither 2-D nor 4-D");
    if (index == last && float_logits)
      define_float_logits(build, index);
    else
      define_node(build, index);
  }
  if (float_logits) return;
  if (!build.values[last].flattened_chw.empty())
    refuse(graph.nodes[last], "is the output but holds a flattened [C, H, W] in XNNPACK's order");
  xnnpack::define_dequantized_output(build.subgraph, build.values[last]);
}

}  // namespace

std::shared_ptr<InferenceModel> xnnpack_int8_graph_runtime_model(const quant::QuantizedGraph& int8,
                                                                 std::int64_t batch,
                                                                 std::shared_ptr<const InferenceModel> busy,
                                                                 int threads) {
  quant::Graph preprocessing = int8.graph();
  preprocessing.nodes.clear();  // what prepare_graph_input reads stays: shape, normalisation, padding
  const xnnpack::PrepareInput prepare = [preprocessing](const torch::Tensor& input) {
    return quant::prepare_graph_input(preprocessing, input);
  };
  const xnnpack::WriteInput write = [preprocessing](const torch::Tensor& input, float* buffer) {
    return quant::write_graph_input_nhwc(preprocessing, input, buffer);
  };
  const auto define = [&](Int8Subgraph& subgraph) {
    if (int8.graph().nodes.size() < 2)
      fail(ErrorCategory::unsupported, "XNNPACK int8 runtime: the graph has no layers");
    const std::vector<Shape> shapes = xnnpack::node_shapes(shape_graph(int8), batch);
    GraphBuild build{int8, shapes, subgraph, {}};
    build_graph_subgraph(build);
    return std::pair<Shape, Shape>{shapes.front(), shapes.back()};
  };
  return xnnpack::int8_runtime_model(int8.mode(), define, int8.graph().input_shape, prepare, std::move(busy),
                                     threads, write);
}

#endif

}  // namespace ipj::infer
