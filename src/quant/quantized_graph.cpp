// int8 conversion and execution of graph IR (see quantized_graph.hpp). Static mode keeps every activation
// in quint8 (channels-last, which oneDNN's convolutions produce anyway) except the logits: a final linear
// layer reads its dequantized input and writes float; dynamic mode runs in float with int8 linear layers.
#include "ipj/quant/quantized_graph.hpp"

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>

#include "ipj/core/error.hpp"
#include "quantized_kernels.hpp"

namespace ipj::quant {
namespace {

bool is_static(QuantMode mode) {
  return mode != QuantMode::dynamic;
}

// The activation folds into the kernel's ReLU when it is relu or a clamp starting at 0 (the upper bound is
// then the output range's top, or an explicit clamp when the bound lies inside the range).
bool fused_relu(const Activation& activation) {
  return activation.kind == ActivationKind::relu ||
         (activation.kind == ActivationKind::clamp && activation.min == 0.0);
}

}  // namespace

bool keeps_float_logits(const Graph& graph, std::size_t index) {
  return index + 1 == graph.nodes.size() && graph.nodes[index].kind == NodeKind::linear;
}

struct QuantizedGraph::Packed {
  std::vector<LinearPacked> linear;  // per node index
  std::vector<ConvPacked> conv;
  // oneDNN's 1x1 convolutions (LibTorch 1.13) fail with "could not create a primitive descriptor for a
  // reorder primitive" when one packing serves calls whose GEMM has one row (batch 1 with a 1x1 output) and
  // calls with more rows on 2+ threads, or one-row calls on different thread counts (torchvision ResNet-18's
  // layer4 downsample and MobileNetV2's last projections on 28x28 inputs; tests/quant/graph_test.cpp). Such a
  // convolution gets a packing per thread count for one-row calls, made on first use.
  std::vector<bool> one_row_packing;  // per node: a 1x1 convolution on oneDNN
  std::vector<torch::Tensor> conv_bias;
  std::vector<Pair> conv_padding;
  mutable std::mutex one_row_mutex;
  mutable std::vector<std::map<int, ConvPacked>> conv_one_row;  // per node: threads -> packing
  std::vector<bool> shift_input;       // static on oneDNN: read the input with zero point 0 (bias corrected)
  std::vector<bool> pad_input;         // ... and pad it explicitly first (a padded conv)
  std::vector<bool> activation_after;  // apply the node's activation after the kernel
  std::vector<std::size_t> last_reader;  // when a value can be freed
  std::vector<QuantParams> params;       // per node output, as the kernels use them
  // Static: the graph's last node when it is a linear layer (the logits), run in float on its dequantized
  // input with the int8 weights dequantized; 8-bit logits (one scale over the whole logit range) flipped
  // close calls: 0.41 of MobileNetV2's 0.54 pt drop on Fashion-MNIST (docs/INFERENCE.md).
  std::size_t float_logits_node = SIZE_MAX;
  torch::Tensor float_logits_weight;  // [classes, in] float
};

// The packing of conv node `index` for input x [B, C, H, W] (padded already where pad_input says so);
// `weight` gives the node's kernel weights for a one-row packing made on first use.
const ConvPacked& conv_kernel(const QuantizedGraph::Packed& packed, const GraphNode& node, std::size_t index,
                              const torch::Tensor& x, const std::function<torch::Tensor()>& weight) {
  if (!packed.one_row_packing[index]) return packed.conv[index];
  const Pair& padding = packed.conv_padding[index];
  const std::int64_t rows = x.size(0) * ((x.size(2) + 2 * padding[0] - 1) / node.stride[0] + 1) *
                            ((x.size(3) + 2 * padding[1] - 1) / node.stride[1] + 1);  // 1x1 kernel
  if (rows != 1) return packed.conv[index];
  const std::lock_guard<std::mutex> lock(packed.one_row_mutex);
  ConvPacked& one_row = packed.conv_one_row[index][at::get_num_threads()];
  if (!one_row)
    one_row =
        prepack_conv(weight(), packed.conv_bias[index], node.stride, padding, node.dilation, node.groups);
  return one_row;
}

QuantizedGraph QuantizedGraph::convert(const Graph& graph, QuantMode mode,
                                       const std::vector<QuantParams>& params, const std::string& engine) {
  torch::NoGradGuard no_grad;
  validate_graph(graph, graph.model_name);
  if (is_static(mode) && params.size() != graph.nodes.size())
    fail(ErrorCategory::internal, "static graph conversion needs one QuantParams per node");
  QuantizedGraph result;
  result.mode_ = mode;
  result.engine_ = select_quantized_engine(engine);
  result.graph_ = graph;
  result.params_ = is_static(mode) ? params : std::vector<QuantParams>(graph.nodes.size());
  result.weight_int8_.resize(graph.nodes.size());
  result.weight_scale_.resize(graph.nodes.size());
  for (std::size_t index = 0; index < graph.nodes.size(); ++index) {
    GraphNode& node = result.graph_.nodes[index];
    if (!has_weights(node) || (node.kind == NodeKind::conv2d && !is_static(mode))) continue;
    const torch::Tensor scales = weight_scales(node.weight);  // [out] double
    const torch::Tensor zero_points = torch::zeros({scales.size(0)}, torch::kLong);
    result.weight_int8_[index] =
        torch::quantize_per_channel(node.weight, scales, zero_points, 0, torch::kQInt8).int_repr();
    result.weight_scale_[index] = scales;
    node.weight = torch::Tensor();  // the int8 copy replaces it
  }
  result.pack();
  return result;
}

void QuantizedGraph::pack() {
  const std::size_t count = graph_.nodes.size();
  auto packed = std::make_shared<Packed>();
  packed->linear.resize(count);
  packed->conv.resize(count);
  packed->one_row_packing.assign(count, false);
  packed->conv_bias.resize(count);
  packed->conv_padding.resize(count);
  packed->conv_one_row.resize(count);
  packed->shift_input.assign(count, false);
  packed->pad_input.assign(count, false);
  packed->activation_after.assign(count, false);
  packed->last_reader = graph_last_readers(graph_);
  packed->params = params_;
  if (is_static(mode_) && keeps_float_logits(graph_, count - 1)) {
    packed->float_logits_node = count - 1;
    packed->float_logits_weight =
        weight_int8_.back().to(torch::kFloat) * weight_scale_.back().to(torch::kFloat).unsqueeze(1);
  }
  for (std::size_t index = 0; index < count; ++index) {
    const GraphNode& node = graph_.nodes[index];
    const bool kernel_relu = is_static(mode_) && index != packed->float_logits_node &&
                             (has_weights(node) || node.kind == NodeKind::add);
    if (node.activation.kind != ActivationKind::none) {
      const QuantParams& out = packed->params[index];
      const double range_top = out.scale * static_cast<double>(255 - out.zero_point);
      const bool bound_inside =
          node.activation.kind == ActivationKind::clamp && node.activation.max < range_top;
      packed->activation_after[index] = !kernel_relu || !fused_relu(node.activation) || bound_inside;
    }
    if (!weight_int8_[index].defined() || index == packed->float_logits_node) continue;
    const torch::Tensor qweight = quantize_weight(weight_int8_[index], weight_scale_[index], engine_);
    torch::Tensor bias = node.bias;
    Pair padding = node.padding;
    const QuantParams& in = packed->params[node.inputs[0]];
    if (is_static(mode_) && engine_ == "onednn" && in.zero_point != 0) {
      // oneDNN's int8 kernels are wrong for inputs with a non-zero zero point (measured on MobileNetV2's
      // linear bottlenecks: argmax agreement 0.36 vs fp32): the kernel reads x + scale * zero_point instead,
      // and its contribution is subtracted from the bias. Exact; 7-bit weights keep the larger u8 values
      // from saturating (quantized_kernels.hpp).
      const torch::Tensor weight_sums = qweight.dequantize().reshape({qweight.size(0), -1}).sum(1);  // [out]
      packed->shift_input[index] = true;
      bias = bias - weight_sums * (in.scale * static_cast<double>(in.zero_point));
      packed->pad_input[index] = padding[0] != 0 || padding[1] != 0;
      padding = {0, 0};
    }
    if (node.kind == NodeKind::linear)
      packed->linear[index] = prepack_linear(qweight, bias);
    else
      packed->conv[index] = prepack_conv(qweight, bias, node.stride, padding, node.dilation, node.groups);
    if (node.kind == NodeKind::conv2d && engine_ == "onednn" && qweight.size(2) == 1 &&
        qweight.size(3) == 1) {
      packed->one_row_packing[index] = true;
      packed->conv_bias[index] = bias;
      packed->conv_padding[index] = padding;
    }
  }
  packed_ = std::move(packed);
}

std::pair<torch::Tensor, torch::Tensor> QuantizedGraph::kernel_weight(std::size_t index) const {
  const torch::Tensor quantized = quantize_weight(weight_int8_.at(index), weight_scale_.at(index), engine_);
  return {quantized.int_repr(), quantized.q_per_channel_scales().to(torch::kDouble)};
}

Graph QuantizedGraph::dequantized_graph() const {
  Graph graph = graph_;
  for (std::size_t index = 0; index < graph.nodes.size(); ++index) {
    if (!weight_int8_[index].defined()) continue;
    std::vector<std::int64_t> per_channel(weight_int8_[index].dim(), 1);  // [O, 1, ...]
    per_channel[0] = -1;
    graph.nodes[index].weight =
        weight_int8_[index].to(torch::kFloat) * weight_scale_[index].to(torch::kFloat).view(per_channel);
  }
  return graph;
}

torch::Tensor QuantizedGraph::forward(const torch::Tensor& input) const {
  torch::NoGradGuard no_grad;
  use_quantized_engine(engine_);
  return is_static(mode_) ? forward_static(input) : forward_dynamic(input);
}

torch::Tensor QuantizedGraph::forward_static(const torch::Tensor& input) const {
  const Packed& packed = *packed_;
  std::vector<torch::Tensor> values(graph_.nodes.size());
  for (std::size_t index = 0; index < graph_.nodes.size(); ++index) {
    const GraphNode& node = graph_.nodes[index];
    const QuantParams& out = packed.params[index];
    torch::Tensor x = node.inputs.empty() ? torch::Tensor() : values[node.inputs[0]];
    if (packed.shift_input[index]) {
      if (packed.pad_input[index])  // pads with the zero point, i.e. real 0
        x = torch::constant_pad_nd(x, {node.padding[1], node.padding[1], node.padding[0], node.padding[0]},
                                   0.0);
      x = with_zero_point_zero(x);
    }
    const bool relu = fused_relu(node.activation);
    torch::Tensor y;
    switch (node.kind) {
      case NodeKind::input:
        // clamped to the 8-bit range first: as quantize_per_tensor saturates, but values of about 1e17 and
        // above it maps to 0 (LibTorch 1.13), i.e. to the most negative value
        y = torch::quantize_per_tensor(
            prepare_graph_input(graph_, input)
                .clamp(-out.scale * out.zero_point, out.scale * static_cast<double>(255 - out.zero_point)),
            out.scale, out.zero_point, torch::kQUInt8);
        if (y.dim() == 4) y = y.contiguous(at::MemoryFormat::ChannelsLast);
        break;
      case NodeKind::conv2d: {  // [B, C, H, W] quint8 -> [B, out, H', W'] quint8
        const ConvPacked& conv = conv_kernel(packed, node, index, x, [this, index] {
          return quantize_weight(weight_int8_[index], weight_scale_[index], engine_);
        });
        y = relu ? conv->apply_relu(x, out.scale, out.zero_point) : conv->apply(x, out.scale, out.zero_point);
        break;
      }
      case NodeKind::linear:
        if (index == packed.float_logits_node) {  // [B, in] quint8 -> [B, classes] float
          y = torch::linear(x.dequantize(), packed.float_logits_weight, node.bias);
          break;
        }
        y = relu ? packed.linear[index]->apply_relu(x, out.scale, out.zero_point)
                 : packed.linear[index]->apply(x, out.scale, out.zero_point);
        break;
      case NodeKind::add:
        y = quantized_add(x, values[node.inputs[1]], out, relu);
        break;
      default:  // clamp, pools, flatten: quantized ATen ops that keep their input's parameters
        y = run_graph_node(node, {x}, torch::Tensor());
        break;
    }
    if (packed.activation_after[index]) y = apply_activation(node.activation, y);
    values[index] = std::move(y);
    for (const std::size_t producer : node.inputs)
      if (packed.last_reader[producer] == index) values[producer] = torch::Tensor();
  }
  const torch::Tensor& output = values.back();  // [B, classes]
  return output.is_quantized() ? output.dequantize() : output;
}

torch::Tensor QuantizedGraph::forward_dynamic(const torch::Tensor& input) const {
  const Packed& packed = *packed_;
  std::vector<torch::Tensor> values(graph_.nodes.size());
  for (std::size_t index = 0; index < graph_.nodes.size(); ++index) {
    const GraphNode& node = graph_.nodes[index];
    std::vector<torch::Tensor> in;
    for (const std::size_t producer : node.inputs)
      in.push_back(values[producer]);
    torch::Tensor y;
    if (node.kind == NodeKind::input) {
      y = prepare_graph_input(graph_, input);
    } else if (packed.linear[index]) {
      y = packed.linear[index]->apply_dynamic(in[0], false);  // [B, in] float -> [B, out] float
    } else {
      y = run_graph_node(node, in, node.weight);
    }
    values[index] = apply_activation(node.activation, y);
    for (const std::size_t producer : node.inputs)
      if (packed.last_reader[producer] == index) values[producer] = torch::Tensor();
  }
  return values.back();
}

std::int64_t QuantizedGraph::parameter_bytes() const {
  std::int64_t bytes = 0;
  for (std::size_t index = 0; index < graph_.nodes.size(); ++index) {
    const GraphNode& node = graph_.nodes[index];
    if (weight_int8_[index].defined())
      bytes += weight_int8_[index].numel() + weight_scale_[index].numel() * 4;
    if (node.weight.defined()) bytes += node.weight.numel() * 4;
    if (node.bias.defined()) bytes += node.bias.numel() * 4;
  }
  return bytes;
}

}  // namespace ipj::quant
