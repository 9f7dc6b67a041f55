// Graph IR -> ONNX nodes (see onnx_export.hpp). Each graph node becomes its operator, then its activation
// (Relu or Clip); in static int8 every node output is followed by QuantizeLinear/DequantizeLinear with that
// node's quint8 parameters, and int8 weights are DequantizeLinear'd (per output channel, axis 0)
// initializers.
#include <torch/torch.h>

#include <onnx/onnx_pb.h>

#include "ipj/core/error.hpp"
#include "ipj/export/onnx_export.hpp"
#include "onnx_builder.hpp"

namespace ipj::exporter {
namespace {

using quant::ActivationKind;
using quant::GraphNode;
using quant::NodeKind;

std::vector<std::int64_t> pads_of(const quant::Pair& padding) {  // ONNX: [top, left, bottom, right]
  return {padding[0], padding[1], padding[0], padding[1]};
}

std::vector<std::int64_t> as_vector(const quant::Pair& pair) {
  return {pair[0], pair[1]};
}

// The graph with float weights everywhere: int8 weights dequantized (int8 * scale per output channel).
quant::Graph float_view(const quant::Graph& graph, const Int8Weights* int8) {
  quant::Graph view = graph;
  for (std::size_t index = 0; index < view.nodes.size(); ++index) {
    GraphNode& node = view.nodes[index];
    if (!quant::has_weights(node) || node.weight.defined() || int8 == nullptr) continue;
    const torch::Tensor& values = int8->weight_int8.at(index);  // [out, ...]
    std::vector<std::int64_t> scale_shape(static_cast<std::size_t>(values.dim()), 1);
    scale_shape[0] = -1;
    node.weight = values.to(torch::kFloat) * int8->weight_scale.at(index).to(torch::kFloat).view(scale_shape);
  }
  return view;
}

// Per-sample output shapes of every node ([C, H, W] or [features]), from one zero sample through the graph.
std::vector<std::vector<std::int64_t>> node_output_shapes(const quant::Graph& graph) {
  torch::NoGradGuard no_grad;
  std::vector<std::vector<std::int64_t>> shapes(graph.nodes.size());
  quant::GraphHooks hooks;
  hooks.output = [&](std::size_t index, torch::Tensor output) {
    shapes[index] = output.sizes().slice(1).vec();
    return output;
  };
  std::vector<std::int64_t> input_shape{1};
  input_shape.insert(input_shape.end(), graph.input_shape.begin(), graph.input_shape.end());
  quant::run_graph(graph, torch::zeros(input_shape), hooks);
  return shapes;
}

class OnnxConverter {
 public:
  // `graph` has float weights everywhere (float_view); `int8` says which of them are int8 in the model.
  OnnxConverter(const quant::Graph& graph, const Int8Weights* int8, onnx::GraphProto& proto)
      : graph_(graph), int8_(int8), proto_(proto), writer_(proto), values_(graph.nodes.size()) {}

  void convert() {
    shapes_ = node_output_shapes(graph_);
    writer_.add_input(kInputName, graph_.input_shape, "batch");
    for (std::size_t index = 0; index < graph_.nodes.size(); ++index)
      values_[index] = convert_node(index);
    // The last node's last operator writes the graph output directly.
    onnx::NodeProto* last = proto_.mutable_node(proto_.node_size() - 1);
    if (last->output(0) != values_.back())
      fail(ErrorCategory::internal, "ONNX export: the last operator does not produce the graph output");
    last->set_output(0, kOutputName);
    writer_.add_output(kOutputName, shapes_.back(), "batch");
  }

 private:
  const quant::Graph& graph_;
  const Int8Weights* int8_;
  onnx::GraphProto& proto_;
  OnnxGraphWriter writer_;
  std::vector<std::string> values_;  // per node: the tensor holding its (dequantized) output
  std::vector<std::vector<std::int64_t>> shapes_;
  bool is_static() const { return int8_ != nullptr && int8_->mode != quant::QuantMode::dynamic; }
  bool is_int8_weight(std::size_t index) const {
    return int8_ != nullptr && index < int8_->weight_int8.size() && int8_->weight_int8[index].defined();
  }

  std::string scalar(const std::string& name, float value) {
    return writer_.initializer(name, torch::tensor(value));
  }

  // Raw pixels -> the value node 0 stands for: reshape (flat inputs keep [N, features]), normalisation,
  // the folded first convolution's mean padding (x - v, zero pad, + v: exact as in prepare_graph_input).
  std::string preprocess() {
    std::string x = kInputName;
    const std::int64_t channels = graph_.input_shape.size() == 3 ? graph_.input_shape[0] : 1;
    auto per_channel = [&](const std::string& name, const std::vector<float>& values) {
      torch::Tensor tensor = torch::tensor(values);  // [C] or [1]
      if (graph_.input_shape.size() == 3)
        tensor = tensor.expand({channels}).reshape({-1, 1, 1});  // [C, 1, 1]
      return writer_.initializer(name, tensor.contiguous());
    };
    if (!graph_.input_mean.empty()) {
      x = writer_.node("Sub", {x, per_channel("input.mean", graph_.input_mean)}, {"input.centered"})
              .output(0);
      x = writer_.node("Div", {x, per_channel("input.std", graph_.input_std)}, {"input.normalized"})
              .output(0);
    }
    if (graph_.input_padding > 0) {
      const std::string value = per_channel("input.pad_value", graph_.input_pad_value);
      const std::int64_t pad = graph_.input_padding;
      const std::string pads = writer_.initializer(
          "input.pads", torch::tensor(std::vector<std::int64_t>{0, 0, pad, pad, 0, 0, pad, pad}));
      x = writer_.node("Sub", {x, value}, {"input.shifted"}).output(0);
      x = writer_.node("Pad", {x, pads}, {"input.padded_shifted"}).output(0);
      x = writer_.node("Add", {x, value}, {"input.padded"}).output(0);
    }
    return x;
  }

  // The node's weight as ONNX sees it: a float initializer, or 8-bit + DequantizeLinear (axis 0). The int8
  // values go out as uint8 with zero point 128 (the same real values): ONNX Runtime then fuses them into its
  // u8 x u8 kernels, exact everywhere; with int8 weights it picks u8 x s8 kernels whose int16 pair sums
  // saturate on CPUs without VNNI (measured: 14 output steps off on one linear layer, AVX2, ORT 1.30).
  std::string weight(std::size_t index) {
    const GraphNode& node = graph_.nodes[index];
    if (!is_int8_weight(index))
      return writer_.initializer(node.name + ".weight", node.weight.to(torch::kFloat));
    const torch::Tensor& values = int8_->weight_int8[index];                          // [out, ...] int8
    const torch::Tensor shifted = (values.to(torch::kShort) + 128).to(torch::kByte);  // [out, ...] uint8
    const std::string quantized = writer_.initializer(node.name + ".weight_uint8", shifted);
    const std::string scale =
        writer_.initializer(node.name + ".weight_scale", int8_->weight_scale[index].to(torch::kFloat));
    const std::string zero = writer_.initializer(node.name + ".weight_zero_point",
                                                 torch::full({values.size(0)}, 128, torch::kByte));
    onnx::NodeProto& dequantize =
        writer_.node("DequantizeLinear", {quantized, scale, zero}, {node.name + ".weight"});
    set_attribute(dequantize, "axis", std::int64_t{0});
    return dequantize.output(0);
  }

  // Dynamic int8: the input of an int8 linear layer quantized per batch (uint8, range including 0).
  std::string dynamic_quantize(const std::string& x, const std::string& name) {
    onnx::NodeProto& quantize =
        writer_.node("DynamicQuantizeLinear", {x},
                     {name + ".input_uint8", name + ".input_scale", name + ".input_zero_point"});
    return writer_
        .node("DequantizeLinear", {quantize.output(0), quantize.output(1), quantize.output(2)},
              {name + ".input_dequantized"})
        .output(0);
  }

  std::string activation(const GraphNode& node, const std::string& x) {
    switch (node.activation.kind) {
      case ActivationKind::none:
        return x;
      case ActivationKind::relu:
        return writer_.node("Relu", {x}, {node.name + ".relu"}).output(0);
      case ActivationKind::clamp: {
        const std::string low = scalar(node.name + ".clip_min", static_cast<float>(node.activation.min));
        const std::string high = scalar(node.name + ".clip_max", static_cast<float>(node.activation.max));
        return writer_.node("Clip", {x, low, high}, {node.name + ".clip"}).output(0);
      }
    }
    return x;
  }

  std::string quantize_dequantize(std::size_t index, const std::string& x) {
    const quant::QuantParams& params = int8_->params.at(index);
    const std::string& name = graph_.nodes[index].name;
    const std::string scale = scalar(name + ".scale", static_cast<float>(params.scale));
    const std::string zero = writer_.initializer(
        name + ".zero_point", torch::tensor(static_cast<std::uint8_t>(params.zero_point), torch::kByte));
    const std::string quantized =
        writer_.node("QuantizeLinear", {x, scale, zero}, {name + ".quint8"}).output(0);
    return writer_.node("DequantizeLinear", {quantized, scale, zero}, {name + ".dequantized"}).output(0);
  }

  std::string convert_node(std::size_t index) {
    const GraphNode& node = graph_.nodes[index];
    std::string x = index == 0 ? preprocess() : operation(index);
    x = activation(node, x);
    if (is_static()) x = quantize_dequantize(index, x);
    return x;
  }

  std::string operation(std::size_t index) {
    const GraphNode& node = graph_.nodes[index];
    const std::string& in = values_[node.inputs[0]];
    switch (node.kind) {
      case NodeKind::input:
        break;
      case NodeKind::conv2d: {  // [N, C, H, W] -> [N, out, H', W']
        const std::string w = weight(index);
        const std::string b = writer_.initializer(node.name + ".bias", node.bias.to(torch::kFloat));
        onnx::NodeProto& conv = writer_.node("Conv", {in, w, b}, {node.name});
        set_attribute(conv, "kernel_shape",
                      std::vector<std::int64_t>{node.weight.size(2), node.weight.size(3)});
        set_attribute(conv, "strides", as_vector(node.stride));
        set_attribute(conv, "pads", pads_of(node.padding));
        set_attribute(conv, "dilations", as_vector(node.dilation));
        set_attribute(conv, "group", node.groups);
        return conv.output(0);
      }
      case NodeKind::linear: {  // [N, in] -> [N, out]: Gemm with the weight [out, in] transposed
        const bool dynamic = int8_ != nullptr && !is_static() && is_int8_weight(index);
        const std::string input = dynamic ? dynamic_quantize(in, node.name) : in;
        const std::string w = weight(index);
        const std::string b = writer_.initializer(node.name + ".bias", node.bias.to(torch::kFloat));
        onnx::NodeProto& gemm = writer_.node("Gemm", {input, w, b}, {node.name});
        set_attribute(gemm, "transB", std::int64_t{1});
        return gemm.output(0);
      }
      case NodeKind::add:
        return writer_.node("Add", {in, values_[node.inputs[1]]}, {node.name}).output(0);
      case NodeKind::clamp:
        return in;  // the activation does the work
      case NodeKind::max_pool2d: {
        onnx::NodeProto& pool = writer_.node("MaxPool", {in}, {node.name});
        set_attribute(pool, "kernel_shape", as_vector(node.kernel));
        set_attribute(pool, "strides", as_vector(node.stride));
        set_attribute(pool, "pads", pads_of(node.padding));
        set_attribute(pool, "dilations", as_vector(node.dilation));
        set_attribute(pool, "ceil_mode", std::int64_t{node.ceil_mode ? 1 : 0});
        return pool.output(0);
      }
      case NodeKind::avg_pool2d: {
        onnx::NodeProto& pool = writer_.node("AveragePool", {in}, {node.name});
        set_attribute(pool, "kernel_shape", as_vector(node.kernel));
        set_attribute(pool, "strides", as_vector(node.stride));
        set_attribute(pool, "pads", pads_of(node.padding));
        set_attribute(pool, "ceil_mode", std::int64_t{node.ceil_mode ? 1 : 0});
        set_attribute(pool, "count_include_pad", std::int64_t{node.count_include_pad ? 1 : 0});
        return pool.output(0);
      }
      case NodeKind::adaptive_avg_pool2d:
        return adaptive_pool(index, in);
      case NodeKind::flatten: {  // [N, ...] -> [N, prod(...)]
        onnx::NodeProto& flatten = writer_.node("Flatten", {in}, {node.name});
        set_attribute(flatten, "axis", std::int64_t{1});
        return flatten.output(0);
      }
    }
    fail(ErrorCategory::internal, "ONNX export: node '" + node.name + "' of an unknown kind");
  }

  // Adaptive average pooling: GlobalAveragePool to 1x1, else AveragePool when the output divides the input.
  std::string adaptive_pool(std::size_t index, const std::string& in) {
    const GraphNode& node = graph_.nodes[index];
    if (node.output_size == quant::Pair{1, 1})
      return writer_.node("GlobalAveragePool", {in}, {node.name}).output(0);
    const std::vector<std::int64_t>& input_shape = shapes_.at(node.inputs[0]);  // [C, H, W]
    const std::int64_t height = input_shape.at(1), width = input_shape.at(2);
    if (height % node.output_size[0] != 0 || width % node.output_size[1] != 0)
      fail(ErrorCategory::unsupported,
           "ONNX export: node '" + node.name + "' (adaptive_avg_pool2d to " +
               std::to_string(node.output_size[0]) + "x" + std::to_string(node.output_size[1]) + " from " +
               std::to_string(height) + "x" + std::to_string(width) +
               ") has no fixed ONNX pooling; use an input size that the output size divides");
    const std::vector<std::int64_t> kernel{height / node.output_size[0], width / node.output_size[1]};
    onnx::NodeProto& pool = writer_.node("AveragePool", {in}, {node.name});
    set_attribute(pool, "kernel_shape", kernel);
    set_attribute(pool, "strides", kernel);
    return pool.output(0);
  }
};

}  // namespace

std::string graph_to_onnx(const quant::Graph& graph, const Int8Weights* int8, int opset) {
  if (opset < kMinimumOpset || opset > kMaximumOpset)
    fail(ErrorCategory::usage, "--opset " + std::to_string(opset) + " is outside what ipj writes (" +
                                   std::to_string(kMinimumOpset) + " to " + std::to_string(kMaximumOpset) +
                                   ")");
  if (int8 != nullptr && int8->mode != quant::QuantMode::dynamic && int8->params.size() != graph.nodes.size())
    fail(ErrorCategory::internal, "ONNX export of a static int8 graph needs one QuantParams per node");
  onnx::ModelProto model;
  model.set_ir_version(8);  // onnx 1.12's IR version
  model.set_producer_name("ipj");
  model.set_producer_version("0.1.0");
  model.set_model_version(1);
  model.set_doc_string("ipj export of '" + graph.model_name + "': raw pixels in [0, 1] -> logits");
  onnx::OperatorSetIdProto* opset_import = model.add_opset_import();
  opset_import->set_domain("");
  opset_import->set_version(opset);
  onnx::GraphProto* proto = model.mutable_graph();
  proto->set_name(graph.model_name.empty() ? "ipj_model" : graph.model_name);
  const quant::Graph view = float_view(graph, int8);
  quant::validate_graph(view, graph.model_name);
  OnnxConverter converter(view, int8, *proto);
  converter.convert();
  std::string serialized;
  if (!model.SerializeToString(&serialized))
    fail(ErrorCategory::internal, "ONNX export: protobuf serialization failed (model over 2 GiB?)");
  check_onnx_model(serialized, graph.model_name);
  return serialized;
}

}  // namespace ipj::exporter
