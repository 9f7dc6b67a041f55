// ipj's graph IR as one XNNPACK subgraph runtime: values in NHWC (XNNPACK's layout), weights permuted to it
// and packed once by xnn_create_runtime_v2, input and output in buffers the runtime was set up on. Limits:
// one batch size; average pools exclude padding (XNNPACK's rule) so a padded count_include_pad pool is
// refused; every other refusal names the node. The caller checks the result against eager before use.
#include "ipj/infer/xnnpack_runtime.hpp"

#include <torch/types.h>

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "ipj/core/error.hpp"

#include "xnnpack_planned_runtime.hpp"

namespace ipj::infer {

namespace {

thread_local int uncounted_scopes = 0;  // UncountedRuntimeCalls alive on this thread

}  // namespace

UncountedRuntimeCalls::UncountedRuntimeCalls() {
  ++uncounted_scopes;
}

UncountedRuntimeCalls::~UncountedRuntimeCalls() {
  --uncounted_scopes;
}

bool runtime_calls_counted_on_this_thread() {
  return uncounted_scopes == 0;
}

#ifndef IPJ_WITH_XNNPACK

namespace {

[[noreturn]] void xnnpack_missing() {
  fail(ErrorCategory::unsupported,
       "this ipj was built without XNNPACK's subgraph API (install libxnnpack-dev and libpthreadpool-dev, "
       "then rebuild)");
}

}  // namespace

bool xnnpack_runtime_available() {
  return false;
}

std::uint64_t xnnpack_runtime_calls() {
  return 0;
}

std::shared_ptr<InferenceModel> xnnpack_runtime_model(const quant::Graph&, std::int64_t, int,
                                                      std::shared_ptr<const InferenceModel>, XnnpackIdle) {
  xnnpack_missing();
}

std::shared_ptr<InferenceModel> xnnpack_int8_runtime_model(const quant::QuantizedProgram&, std::int64_t,
                                                           std::shared_ptr<const InferenceModel>, int) {
  xnnpack_missing();
}

std::shared_ptr<InferenceModel> xnnpack_int8_graph_runtime_model(const quant::QuantizedGraph&, std::int64_t,
                                                                 std::shared_ptr<const InferenceModel>, int) {
  xnnpack_missing();
}

#else

namespace {

using xnnpack::axis_taps;
using xnnpack::AxisTaps;
using xnnpack::ceil_padding;
using xnnpack::live_nodes;
using xnnpack::node_shapes;
using xnnpack::Shape;
using xnnpack::xnn_dims;

// One IR node's output as a subgraph value: its XNNPACK id, its ATen shape ([N, C, H, W] or [N, F]) and, for
// a flattened 4-D value, the [C, H, W] it came from (its elements are then in H, W, C order).
struct XnnValue {
  std::uint32_t id = XNN_INVALID_VALUE_ID;
  Shape aten_shape;
  Shape flattened_chw;
};

struct Subgraph {
  xnn_subgraph_t handle = nullptr;
  // What static values point to, alive until xnn_create_runtime_v2 has packed them into the runtime's own
  // buffers (fp32 convolutions and fully connected layers copy their weights there; nothing else here is
  // static), then freed: the runtime holds one packed copy of the weights, not two.
  std::vector<torch::Tensor> weights;
  std::vector<XnnValue> values;  // per IR node
};

[[noreturn]] void refuse_node(const quant::GraphNode& node, const std::string& why) {
  fail(ErrorCategory::unsupported,
       "XNNPACK runtime: node '" + node.name + "' (" + quant::node_kind_name(node.kind) + ") " + why);
}

void check_xnn(xnn_status status, const quant::GraphNode& node, const char* what) {
  if (status != xnn_status_success)
    refuse_node(node,
                std::string("refused by XNNPACK's ") + what + " (" + xnnpack::status_text(status) + ")");
}

// The output range of `node`'s activation; XNNPACK takes only ranges with min < max.
std::pair<float, float> node_range(const quant::GraphNode& node) {
  constexpr float inf = std::numeric_limits<float>::infinity();
  std::pair<float, float> range{-inf, inf};  // ActivationKind::none
  if (node.activation.kind == quant::ActivationKind::relu) range.first = 0.0f;
  if (node.activation.kind == quant::ActivationKind::clamp)
    range = {static_cast<float>(node.activation.min), static_cast<float>(node.activation.max)};
  if (!(range.first < range.second))
    refuse_node(node, "clamps to the empty range [" + std::to_string(range.first) + ", " +
                          std::to_string(range.second) + "] (XNNPACK's clamps need min < max)");
  return range;
}

// A new value of `aten_shape` for node `index`: external output 1 when it is the graph's last node.
std::uint32_t define_value(Subgraph& subgraph, const Shape& aten_shape, bool is_output,
                           const quant::GraphNode& node) {
  const std::vector<std::size_t> dims = xnn_dims(aten_shape);
  std::uint32_t id = XNN_INVALID_VALUE_ID;
  check_xnn(xnn_define_tensor_value(subgraph.handle, xnn_datatype_fp32, dims.size(), dims.data(), nullptr,
                                    is_output ? 1 : XNN_INVALID_VALUE_ID,
                                    is_output ? XNN_VALUE_FLAG_EXTERNAL_OUTPUT : 0, &id),
            node, "tensor value");
  return id;
}

// A static value holding `tensor` (kept alive in subgraph.weights while the runtime is made).
std::uint32_t define_static(Subgraph& subgraph, torch::Tensor tensor, const quant::GraphNode& node) {
  tensor = tensor.to(torch::kFloat).contiguous();
  subgraph.weights.push_back(tensor);
  const std::vector<std::size_t> dims(tensor.sizes().begin(), tensor.sizes().end());
  std::uint32_t id = XNN_INVALID_VALUE_ID;
  check_xnn(xnn_define_tensor_value(subgraph.handle, xnn_datatype_fp32, dims.size(), dims.data(),
                                    tensor.data_ptr<float>(), XNN_INVALID_VALUE_ID, 0, &id),
            node, "static tensor");
  return id;
}

const XnnValue& four_d_input(const Subgraph& subgraph, const quant::GraphNode& node) {
  const XnnValue& input = subgraph.values[node.inputs.at(0)];
  if (input.aten_shape.size() != 4 || !input.flattened_chw.empty())
    refuse_node(node, "reads a value that is not [N, C, H, W]");
  return input;
}

std::uint32_t define_conv2d(Subgraph& subgraph, const quant::GraphNode& node, const Shape& out,
                            std::uint32_t output) {
  const XnnValue& input = four_d_input(subgraph, node);
  const Shape& in = input.aten_shape;
  const AxisTaps rows =
      axis_taps(in[2], out[2], node.weight.size(2), node.stride[0], node.padding[0], node.dilation[0]);
  const AxisTaps columns =
      axis_taps(in[3], out[3], node.weight.size(3), node.stride[1], node.padding[1], node.dilation[1]);
  const torch::Tensor weight = node.weight.narrow(2, rows.first, rows.count)
                                   .narrow(3, columns.first, columns.count)
                                   .permute({0, 2, 3, 1});  // [O, I/g, kh, kw] -> [O, kh, kw, I/g]
  const auto [low, high] = node_range(node);
  const auto u32 = [](std::int64_t value) { return static_cast<std::uint32_t>(value); };
  check_xnn(xnn_define_convolution_2d(
                subgraph.handle, u32(rows.pad_before), u32(columns.pad_after), u32(rows.pad_after),
                u32(columns.pad_before), u32(rows.count), u32(columns.count), u32(node.stride[0]),
                u32(node.stride[1]), u32(node.dilation[0]), u32(node.dilation[1]), u32(node.groups),
                static_cast<std::size_t>(node.weight.size(1)),
                static_cast<std::size_t>(node.weight.size(0) / node.groups), low, high, input.id,
                define_static(subgraph, weight, node), define_static(subgraph, node.bias, node), output, 0),
            node, "convolution");
  return output;
}

// A linear layer on [N, F]; after a flatten of [N, C, H, W] (elements in H, W, C order) its weight's columns
// are permuted to that order.
std::uint32_t define_linear(Subgraph& subgraph, const quant::GraphNode& node, std::uint32_t output) {
  const XnnValue& input = subgraph.values[node.inputs.at(0)];
  if (input.aten_shape.size() != 2) refuse_node(node, "reads a value that is not [N, features]");
  torch::Tensor weight = node.weight;  // [out, in]
  if (!input.flattened_chw.empty()) {
    const Shape& chw = input.flattened_chw;
    weight = weight.view({weight.size(0), chw[0], chw[1], chw[2]})
                 .permute({0, 2, 3, 1})
                 .reshape({weight.size(0), -1});
  }
  const auto [low, high] = node_range(node);
  check_xnn(
      xnn_define_fully_connected(subgraph.handle, low, high, input.id, define_static(subgraph, weight, node),
                                 define_static(subgraph, node.bias, node), output, 0),
      node, "fully connected layer");
  return output;
}

std::uint32_t define_pool(Subgraph& subgraph, const quant::GraphNode& node, const Shape& out,
                          std::uint32_t output) {
  const XnnValue& input = four_d_input(subgraph, node);
  const Shape& in = input.aten_shape;
  const auto u32 = [](std::int64_t value) { return static_cast<std::uint32_t>(value); };
  const std::uint32_t extra_h = ceil_padding(in[2], out[2], node.kernel[0], node.stride[0], node.padding[0],
                                             node.kind == quant::NodeKind::max_pool2d ? node.dilation[0] : 1);
  const std::uint32_t extra_w = ceil_padding(in[3], out[3], node.kernel[1], node.stride[1], node.padding[1],
                                             node.kind == quant::NodeKind::max_pool2d ? node.dilation[1] : 1);
  const auto [low, high] = node_range(node);
  if (node.kind == quant::NodeKind::max_pool2d) {
    check_xnn(xnn_define_max_pooling_2d(subgraph.handle, u32(node.padding[0]), u32(node.padding[1]) + extra_w,
                                        u32(node.padding[0]) + extra_h, u32(node.padding[1]),
                                        u32(node.kernel[0]), u32(node.kernel[1]), u32(node.stride[0]),
                                        u32(node.stride[1]), u32(node.dilation[0]), u32(node.dilation[1]),
                                        low, high, input.id, output, 0),
              node, "max pooling");
    return output;
  }
  const bool padded = node.padding[0] > 0 || node.padding[1] > 0 || extra_h > 0 || extra_w > 0;
  if (padded && node.count_include_pad)
    refuse_node(node,
                node.padding[0] > 0 || node.padding[1] > 0
                    ? "counts padding in its averages (XNNPACK's average pooling leaves it out)"
                    : "counts padding in its averages (count_include_pad) and its ceil mode makes windows "
                      "overhang the input, which XNNPACK pads");
  check_xnn(
      xnn_define_average_pooling_2d(subgraph.handle, u32(node.padding[0]), u32(node.padding[1]) + extra_w,
                                    u32(node.padding[0]) + extra_h, u32(node.padding[1]), u32(node.kernel[0]),
                                    u32(node.kernel[1]), u32(node.stride[0]), u32(node.stride[1]), low, high,
                                    input.id, output, 0),
      node, "average pooling");
  return output;
}

// Adaptive average pooling: global to [N, C, 1, 1], or windows of size input/output when that divides.
std::uint32_t define_adaptive_pool(Subgraph& subgraph, const quant::GraphNode& node, std::uint32_t output) {
  const XnnValue& input = four_d_input(subgraph, node);
  const Shape& in = input.aten_shape;
  const auto [low, high] = node_range(node);
  if (node.output_size[0] == 1 && node.output_size[1] == 1) {
    check_xnn(xnn_define_global_average_pooling_2d(subgraph.handle, low, high, input.id, output, 0), node,
              "global average pooling");
    return output;
  }
  if (in[2] % node.output_size[0] != 0 || in[3] % node.output_size[1] != 0)
    refuse_node(node, "has overlapping or uneven windows (input " + std::to_string(in[2]) + "x" +
                          std::to_string(in[3]) + " is not a multiple of the output size " +
                          std::to_string(node.output_size[0]) + "x" + std::to_string(node.output_size[1]) +
                          ")");
  const auto kh = static_cast<std::uint32_t>(in[2] / node.output_size[0]);
  const auto kw = static_cast<std::uint32_t>(in[3] / node.output_size[1]);
  check_xnn(xnn_define_average_pooling_2d(subgraph.handle, 0, 0, 0, 0, kh, kw, kh, kw, low, high, input.id,
                                          output, 0),
            node, "average pooling");
  return output;
}

// flatten: [N, C, H, W] -> [N, C*H*W] as a reshape of the NHWC value (so in H, W, C order: only linear layers
// may read it, with permuted weights), or of a [N, F] value as is.
std::uint32_t define_flatten(Subgraph& subgraph, const quant::GraphNode& node, XnnValue& value) {
  const XnnValue& input = subgraph.values[node.inputs.at(0)];
  if (node.activation.kind != quant::ActivationKind::none) refuse_node(node, "has an activation");
  if (input.aten_shape.size() == 4 && input.aten_shape[2] * input.aten_shape[3] > 1)
    value.flattened_chw = {input.aten_shape[1], input.aten_shape[2], input.aten_shape[3]};
  if (input.aten_shape.size() == 2) value.flattened_chw = input.flattened_chw;
  const std::vector<std::size_t> dims = xnn_dims(value.aten_shape);
  check_xnn(xnn_define_static_reshape(subgraph.handle, dims.size(), dims.data(), input.id, value.id, 0), node,
            "reshape");
  return value.id;
}

void define_node(Subgraph& subgraph, const quant::Graph& graph, std::size_t index, const Shape& shape) {
  const quant::GraphNode& node = graph.nodes[index];
  if (shape.size() != 4 && shape.size() != 2) refuse_node(node, "has an output that is neither 2-D nor 4-D");
  XnnValue& value = subgraph.values[index];
  value.aten_shape = shape;
  value.id = define_value(subgraph, shape, index + 1 == graph.nodes.size(), node);
  const auto [low, high] = node_range(node);
  switch (node.kind) {
    case quant::NodeKind::conv2d:
      define_conv2d(subgraph, node, shape, value.id);
      break;
    case quant::NodeKind::linear:
      define_linear(subgraph, node, value.id);
      break;
    case quant::NodeKind::add: {
      const XnnValue& a = subgraph.values[node.inputs.at(0)];
      const XnnValue& b = subgraph.values[node.inputs.at(1)];
      if (a.aten_shape != shape || b.aten_shape != shape || a.flattened_chw != b.flattened_chw)
        refuse_node(node, "adds values of different shapes or layouts");
      value.flattened_chw = a.flattened_chw;
      check_xnn(xnn_define_add2(subgraph.handle, low, high, a.id, b.id, value.id, 0), node, "addition");
      break;
    }
    case quant::NodeKind::clamp: {
      const XnnValue& input = subgraph.values[node.inputs.at(0)];
      value.flattened_chw = input.flattened_chw;
      check_xnn(xnn_define_clamp(subgraph.handle, low, high, input.id, value.id, 0), node, "clamp");
      break;
    }
    case quant::NodeKind::max_pool2d:
    case quant::NodeKind::avg_pool2d:
      define_pool(subgraph, node, shape, value.id);
      break;
    case quant::NodeKind::adaptive_avg_pool2d:
      define_adaptive_pool(subgraph, node, value.id);
      break;
    case quant::NodeKind::flatten:
      define_flatten(subgraph, node, value);
      break;
    case quant::NodeKind::input:
      refuse_node(node, "is an input after node 0");
  }
}

// The subgraph of `graph` at `batch`: external value 0 the prepared input, 1 the last node's output.
Subgraph build_subgraph(const quant::Graph& graph, std::int64_t batch) {
  if (graph.nodes.size() < 2) fail(ErrorCategory::unsupported, "XNNPACK runtime: the graph has no layers");
  const std::vector<Shape> shapes = node_shapes(graph, batch);
  Subgraph subgraph;
  if (xnn_create_subgraph(2, 0, &subgraph.handle) != xnn_status_success)
    fail(ErrorCategory::unsupported, "XNNPACK runtime: no subgraph could be created");
  subgraph.values.resize(graph.nodes.size());
  try {
    const quant::GraphNode& input = graph.nodes[0];
    if (shapes[0].size() != 4 && shapes[0].size() != 2)
      refuse_node(input, "is neither [N, C, H, W] nor [N, F]");
    subgraph.values[0].aten_shape = shapes[0];
    const std::vector<std::size_t> dims = xnn_dims(shapes[0]);
    check_xnn(xnn_define_tensor_value(subgraph.handle, xnn_datatype_fp32, dims.size(), dims.data(), nullptr,
                                      0, XNN_VALUE_FLAG_EXTERNAL_INPUT, &subgraph.values[0].id),
              input, "input value");
    const std::vector<bool> live = live_nodes(graph);
    for (std::size_t index = 1; index < graph.nodes.size(); ++index)
      if (live[index]) define_node(subgraph, graph, index, shapes[index]);
    if (!subgraph.values.back().flattened_chw.empty())
      refuse_node(graph.nodes.back(), "is the output but holds a flattened [C, H, W] in XNNPACK's order");
  } catch (...) {
    xnn_delete_subgraph(subgraph.handle);
    throw;
  }
  return subgraph;
}

}  // namespace

bool xnnpack_runtime_available() {
  return xnnpack::initialised();
}

std::uint64_t xnnpack_runtime_calls() {
  return xnnpack::calls_answered();
}

std::shared_ptr<InferenceModel> xnnpack_runtime_model(const quant::Graph& graph, std::int64_t batch,
                                                      int threads, std::shared_ptr<const InferenceModel> busy,
                                                      XnnpackIdle idle) {
  if (!xnnpack::initialised())
    fail(ErrorCategory::unsupported, "XNNPACK runtime: XNNPACK does not initialise on this CPU");
  Subgraph subgraph = build_subgraph(graph, batch);
  quant::Graph preprocessing = graph;
  preprocessing.nodes.clear();  // what prepare_graph_input reads stays: shape, normalisation, padding
  const xnnpack::PrepareInput prepare = [preprocessing](const torch::Tensor& input) {
    return quant::prepare_graph_input(preprocessing, input);
  };
  const xnnpack::WriteInput write = [preprocessing](const torch::Tensor& input, float* buffer) {
    return quant::write_graph_input_nhwc(preprocessing, input, buffer);
  };
  Shape input_shape = subgraph.values.front().aten_shape, output_shape = subgraph.values.back().aten_shape;
  return std::make_shared<xnnpack::PlannedRuntimeModel>(subgraph.handle, std::move(input_shape),
                                                        std::move(output_shape), graph.input_shape, prepare,
                                                        threads, std::move(busy), idle, write);
}

#endif

}  // namespace ipj::infer
