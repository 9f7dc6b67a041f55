// The graph IR's float interpreter (one ATen call per node, values freed after their last reader), its input
// preparation (also written straight to NHWC for XNNPACK's runtimes) and its passes: validation, node
// erasure, activation fusion, normalisation folding, size counts.
#include "ipj/quant/graph.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "ipj/core/error.hpp"

namespace ipj::quant {
namespace {

constexpr std::pair<NodeKind, const char*> kKindNames[] = {
    {NodeKind::input, "input"},           {NodeKind::conv2d, "conv2d"},
    {NodeKind::linear, "linear"},         {NodeKind::add, "add"},
    {NodeKind::clamp, "clamp"},           {NodeKind::max_pool2d, "max_pool2d"},
    {NodeKind::avg_pool2d, "avg_pool2d"}, {NodeKind::adaptive_avg_pool2d, "adaptive_avg_pool2d"},
    {NodeKind::flatten, "flatten"},
};

std::vector<std::int64_t> as_vector(const Pair& pair) {
  return {pair[0], pair[1]};
}

}  // namespace

torch::Tensor run_graph_node(const GraphNode& node, const std::vector<torch::Tensor>& in,
                             const torch::Tensor& weight) {
  switch (node.kind) {
    case NodeKind::input:
      return in.at(0);
    case NodeKind::conv2d:  // [B, C, H, W] -> [B, out, H', W']
      return torch::conv2d(in[0], weight, node.bias, as_vector(node.stride), as_vector(node.padding),
                           as_vector(node.dilation), node.groups);
    case NodeKind::linear:  // [B, in] -> [B, out]
      return torch::linear(in[0], weight, node.bias);
    case NodeKind::add:
      return in[0] + in[1];
    case NodeKind::clamp:
      return in[0];
    case NodeKind::max_pool2d:
      return torch::max_pool2d(in[0], as_vector(node.kernel), as_vector(node.stride), as_vector(node.padding),
                               as_vector(node.dilation), node.ceil_mode);
    case NodeKind::avg_pool2d:
      return torch::avg_pool2d(in[0], as_vector(node.kernel), as_vector(node.stride), as_vector(node.padding),
                               node.ceil_mode, node.count_include_pad);
    case NodeKind::adaptive_avg_pool2d:
      return torch::adaptive_avg_pool2d(in[0], as_vector(node.output_size));
    case NodeKind::flatten:  // [B, ...] -> [B, prod(...)]
      return in[0].flatten(1);
  }
  fail(ErrorCategory::internal, "unknown node kind");
}

namespace {

std::size_t expected_arity(NodeKind kind) {
  if (kind == NodeKind::input) return 0;
  return kind == NodeKind::add ? 2 : 1;
}

void check_node(const Graph& graph, std::size_t index, const std::string& where, bool require_weights) {
  const GraphNode& node = graph.nodes[index];
  auto bad = [&](const std::string& what) {
    fail(ErrorCategory::invalid_input, where + ": node " + std::to_string(index) + " '" + node.name + "' (" +
                                           node_kind_name(node.kind) + ") " + what);
  };
  if ((index == 0) != (node.kind == NodeKind::input)) bad("is misplaced: node 0, and only it, is the input");
  if (node.inputs.size() != expected_arity(node.kind)) bad("has the wrong number of inputs");
  for (const std::size_t input : node.inputs)
    if (input >= index) bad("reads a later node (" + std::to_string(input) + ")");
  if (has_weights(node) && (require_weights || node.weight.defined())) {
    if (!node.weight.defined() || !node.bias.defined()) bad("has no weight or bias");
    const std::int64_t rank = node.kind == NodeKind::conv2d ? 4 : 2;
    if (node.weight.dim() != rank || node.bias.dim() != 1 || node.bias.size(0) != node.weight.size(0))
      bad("has weights of the wrong shape");
    if (node.groups < 1 || node.weight.size(0) % node.groups != 0) bad("has an invalid group count");
  }
}

}  // namespace

std::string node_kind_name(NodeKind kind) {
  for (const auto& [value, name] : kKindNames)
    if (value == kind) return name;
  return "unknown";
}

NodeKind parse_node_kind(const std::string& name) {
  for (const auto& [value, known] : kKindNames)
    if (name == known) return value;
  fail(ErrorCategory::invalid_input, "unknown graph node kind '" + name + "'");
}

bool has_weights(const GraphNode& node) {
  return node.kind == NodeKind::conv2d || node.kind == NodeKind::linear;
}

namespace {

// clamp of a per-tensor quantized x on its integers: the bounds quantized as LibTorch's quantized clamp does
// (round to nearest, saturated), the same scale and zero point, x's memory format kept. Used under QNNPACK,
// whose quantized clamp/hardtanh in LibTorch 1.13 scrambles channels-last tensors (2.7 off on values of 0.02
// steps, where oneDNN's is exact).
torch::Tensor clamp_quantized_integers(const torch::Tensor& x, double min, double max) {
  const double scale = x.q_scale();
  const std::int64_t zero_point = x.q_zero_point();
  const bool unsigned_8 = x.scalar_type() == torch::kQUInt8;
  const double low = unsigned_8 ? 0.0 : -128.0, high = unsigned_8 ? 255.0 : 127.0;
  const auto bound = [&](double value) {
    return static_cast<std::int64_t>(
        std::clamp(std::nearbyint(value / scale) + static_cast<double>(zero_point), low, high));
  };
  const torch::Tensor integers = x.int_repr().clamp_(bound(min), bound(max));  // same memory format as x
  return at::_make_per_tensor_quantized_tensor(integers, scale, zero_point);
}

// torch::clamp with an infinite bound left out (none: `x`): LibTorch 1.13's quantized clamp (fbgemm) with a
// max of +inf sends every element to the lowest quantum (`torch.clamp(x, min=m)` in a model imports as
// clamp(m, +inf); its int8 batches answered the same logits for every input).
torch::Tensor clamp_finite_bounds(const torch::Tensor& x, double min, double max) {
  const double infinity = std::numeric_limits<double>::infinity();
  const auto bound = [](double value, double absent) -> c10::optional<at::Scalar> {
    return value == absent ? c10::nullopt : c10::optional<at::Scalar>(value);
  };
  const c10::optional<at::Scalar> low = bound(min, -infinity), high = bound(max, infinity);
  if (!low && !high) return x;
  return torch::clamp(x, low, high);
}

}  // namespace

torch::Tensor apply_activation(const Activation& activation, const torch::Tensor& x) {
  switch (activation.kind) {
    case ActivationKind::none:
      return x;
    case ActivationKind::relu:
      return torch::relu(x);
    case ActivationKind::clamp:
      if (x.is_quantized() && x.qscheme() == torch::kPerTensorAffine &&
          at::globalContext().qEngine() == at::QEngine::QNNPACK)
        return clamp_quantized_integers(x, activation.min, activation.max);
      return clamp_finite_bounds(x, activation.min, activation.max);
  }
  return x;
}

torch::Tensor normalize_by_dim1(const torch::Tensor& x, const std::vector<float>& mean,
                                const std::vector<float>& std) {
  if (mean.empty()) return x;
  const auto count = static_cast<std::int64_t>(mean.size());
  if (mean.size() != std.size() || (count != 1 && (x.dim() < 2 || x.size(1) != count)))
    fail(ErrorCategory::usage,
         "mean/std (--mean/--std, or config.json's \"mean\"/\"std\") give " + std::to_string(mean.size()) +
             " and " + std::to_string(std.size()) + " values, but the input has " +
             (x.dim() < 2 ? std::string("no dim 1") : std::to_string(x.size(1)) + " entries along dim 1") +
             ": give one value, or one per channel of a [C, H, W] input (one per feature of a flat one)");
  std::vector<std::int64_t> view(static_cast<std::size_t>(std::max<std::int64_t>(x.dim(), 1)), 1);
  if (count != 1) view[1] = count;
  return (x - torch::tensor(mean).view(view)) / torch::tensor(std).view(view);
}

torch::Tensor prepare_graph_input(const Graph& graph, const torch::Tensor& input) {
  torch::Tensor x = input.to(torch::kFloat);
  std::vector<std::int64_t> shape{x.size(0)};
  shape.insert(shape.end(), graph.input_shape.begin(), graph.input_shape.end());
  if (x.sizes() != torch::IntArrayRef(shape)) x = x.reshape(shape);  // e.g. pixels for a flat input
  x = normalize_by_dim1(x, graph.input_mean, graph.input_std);
  if (graph.input_padding > 0) {
    const std::int64_t pad = graph.input_padding;
    const torch::Tensor value = torch::tensor(graph.input_pad_value).view({1, -1, 1, 1});  // [1, C, 1, 1]
    x = torch::constant_pad_nd(x - value, {pad, pad, pad, pad}, 0.0) + value;
  }
  return x;
}

namespace {

// Whether `values` broadcast over `channels` as one for all or one per channel.
bool per_channel(const std::vector<float>& values, std::int64_t channels) {
  return values.size() == 1 || static_cast<std::int64_t>(values.size()) == channels;
}

// values[channel], or the one value for all.
float channel_value(const std::vector<float>& values, std::int64_t channel) {
  return values.size() == 1 ? values[0] : values[static_cast<std::size_t>(channel)];
}

}  // namespace

bool write_graph_input_nhwc(const Graph& graph, const torch::Tensor& input, float* out) {
  const std::vector<std::int64_t>& shape = graph.input_shape;  // [C, H, W] or [F]
  if (!input.device().is_cpu() || input.scalar_type() != torch::kFloat || !input.is_contiguous() ||
      input.dim() < 1 || (shape.size() != 3 && shape.size() != 1) ||
      graph.input_mean.size() != graph.input_std.size())
    return false;
  const std::int64_t batch = input.size(0), channels = shape[0];
  const std::int64_t height = shape.size() == 3 ? shape[1] : 1, width = shape.size() == 3 ? shape[2] : 1;
  const std::int64_t pad = shape.size() == 3 ? graph.input_padding : 0;
  const bool normalised = !graph.input_mean.empty(), padded = pad > 0;
  if (input.numel() != batch * channels * height * width ||
      (normalised && (!per_channel(graph.input_mean, channels) || !per_channel(graph.input_std, channels))) ||
      (padded && !per_channel(graph.input_pad_value, channels)) ||
      (shape.size() == 1 && graph.input_padding > 0))
    return false;
  const float* x = input.data_ptr<float>();  // [B, C, H, W] / [B, F]
  const std::int64_t out_height = height + 2 * pad, out_width = width + 2 * pad;
  for (std::int64_t n = 0; n < batch; ++n)
    for (std::int64_t c = 0; c < channels; ++c) {
      const float mean = normalised ? channel_value(graph.input_mean, c) : 0.0f;
      const float std = normalised ? channel_value(graph.input_std, c) : 1.0f;
      const float shift = padded ? channel_value(graph.input_pad_value, c) : 0.0f;
      float* image = out + n * out_height * out_width * channels + c;  // [H+2p, W+2p] at stride C
      if (padded)
        for (std::int64_t row = 0; row < out_height; ++row)
          for (std::int64_t column = 0; column < out_width; ++column)
            if (row < pad || row >= pad + height || column < pad || column >= pad + width)
              image[(row * out_width + column) * channels] = 0.0f + shift;  // constant_pad_nd's 0, + value
      for (std::int64_t row = 0; row < height; ++row)
        for (std::int64_t column = 0; column < width; ++column) {
          float value = *x++;
          if (normalised) value = (value - mean) / std;
          if (padded) value = (value - shift) + shift;  // x - value, padded, + value: as rounded there
          image[((row + pad) * out_width + column + pad) * channels] = value;
        }
    }
  return true;
}

std::vector<std::size_t> graph_last_readers(const Graph& graph) {
  std::vector<std::size_t> last_reader(graph.nodes.size(), 0);
  for (std::size_t index = 0; index < graph.nodes.size(); ++index)
    for (const std::size_t producer : graph.nodes[index].inputs)
      last_reader[producer] = index;
  return last_reader;
}

torch::Tensor run_graph(const Graph& graph, const torch::Tensor& input, const GraphHooks& hooks) {
  const std::size_t count = graph.nodes.size();
  const std::vector<std::size_t> last_reader = graph_last_readers(graph);
  std::vector<torch::Tensor> values(count);
  for (std::size_t index = 0; index < count; ++index) {
    const GraphNode& node = graph.nodes[index];
    std::vector<torch::Tensor> in;
    for (const std::size_t producer : node.inputs)
      in.push_back(values[producer]);
    if (node.kind == NodeKind::input) in.push_back(prepare_graph_input(graph, input));
    const torch::Tensor weight =
        has_weights(node) && hooks.weight ? hooks.weight(index, node.weight) : node.weight;
    torch::Tensor output = apply_activation(node.activation, run_graph_node(node, in, weight));
    if (hooks.output) output = hooks.output(index, std::move(output));
    values[index] = std::move(output);
    for (const std::size_t producer : node.inputs)
      if (last_reader[producer] == index) values[producer] = torch::Tensor();
  }
  return values.back();
}

std::vector<std::vector<std::size_t>> graph_consumers(const Graph& graph) {
  std::vector<std::vector<std::size_t>> readers(graph.nodes.size());
  for (std::size_t index = 0; index < graph.nodes.size(); ++index)
    for (const std::size_t producer : graph.nodes[index].inputs)
      readers[producer].push_back(index);
  return readers;
}

void validate_graph(const Graph& graph, const std::string& where, bool require_weights) {
  if (graph.nodes.size() < 2) fail(ErrorCategory::invalid_input, where + ": the graph has no layers");
  if (graph.input_mean.size() != graph.input_std.size())
    fail(ErrorCategory::invalid_input, where + ": input mean and std differ in length");
  std::set<std::string> names;
  for (std::size_t index = 0; index < graph.nodes.size(); ++index) {
    check_node(graph, index, where, require_weights);
    if (!names.insert(graph.nodes[index].name).second)
      fail(ErrorCategory::invalid_input, where + ": two nodes are named '" + graph.nodes[index].name + "'");
  }
}

void erase_nodes(Graph& graph, const std::vector<bool>& erase, const std::vector<std::size_t>& replacement) {
  std::vector<std::size_t> new_index(graph.nodes.size(), 0);
  std::vector<GraphNode> kept;
  for (std::size_t index = 0; index < graph.nodes.size(); ++index) {
    if (erase[index]) continue;
    new_index[index] = kept.size();
    GraphNode node = std::move(graph.nodes[index]);
    for (std::size_t& input : node.inputs) {
      while (erase[input])
        input = replacement[input];
      input = new_index[input];
    }
    kept.push_back(std::move(node));
  }
  graph.nodes = std::move(kept);
}

void fuse_activations(Graph& graph) {
  const auto readers = graph_consumers(graph);
  const std::size_t last = graph.nodes.size() - 1;
  std::vector<bool> erase(graph.nodes.size(), false);
  std::vector<std::size_t> replacement(graph.nodes.size(), 0);
  for (std::size_t index = 1; index < graph.nodes.size(); ++index) {
    const GraphNode& node = graph.nodes[index];
    if (node.kind != NodeKind::clamp) continue;
    const std::size_t producer = node.inputs[0];
    if (index == last && producer + 1 != last) continue;  // the producer must become the last node
    GraphNode& target = graph.nodes[producer];
    const bool fusable = has_weights(target) || target.kind == NodeKind::add;
    if (!fusable || erase[producer] || target.activation.kind != ActivationKind::none ||
        readers[producer].size() != 1)
      continue;
    target.activation = node.activation;
    erase[index] = true;
    replacement[index] = producer;
  }
  erase_nodes(graph, erase, replacement);
}

bool fold_input_normalization(Graph& graph) {
  if (graph.input_mean.empty()) return true;
  const auto readers = graph_consumers(graph);
  if (readers[0].size() != 1) return false;
  GraphNode* target = &graph.nodes[readers[0][0]];
  const bool flat_input = graph.input_shape.size() == 1;
  bool features_in_order = flat_input;  // linear weights then see C*H*W features in channel order
  if (target->kind == NodeKind::flatten && readers[readers[0][0]].size() == 1) {
    target = &graph.nodes[readers[readers[0][0]][0]];
    features_in_order = true;
  }
  const std::int64_t channels = flat_input ? 1 : graph.input_shape[0];
  const torch::Tensor mean = torch::tensor(graph.input_mean).expand({channels});  // [C]
  const torch::Tensor std = torch::tensor(graph.input_std).expand({channels});    // [C]
  torch::NoGradGuard no_grad;
  if (target->kind == NodeKind::conv2d && target->groups == 1 && !flat_input &&
      target->padding[0] == target->padding[1]) {
    // w: [out, C, kh, kw]; w' = w / std_c, b' = b - sum(w' * mean_c)
    const torch::Tensor scaled = target->weight / std.view({1, -1, 1, 1});
    target->bias = target->bias - (scaled * mean.view({1, -1, 1, 1})).sum({1, 2, 3});
    target->weight = scaled;
    graph.input_padding = target->padding[0];
    graph.input_pad_value = std::vector<float>(mean.data_ptr<float>(), mean.data_ptr<float>() + channels);
    target->padding = {0, 0};
  } else if (target->kind == NodeKind::linear && features_in_order) {
    // after flatten: feature i belongs to channel i / (H * W); w: [out, C*H*W]
    const std::int64_t per_channel = target->weight.size(1) / channels;
    const torch::Tensor scaled = target->weight / std.repeat_interleave(per_channel).view({1, -1});
    target->bias = target->bias - torch::matmul(scaled, mean.repeat_interleave(per_channel));
    target->weight = scaled;
  } else {
    return false;
  }
  graph.input_mean.clear();
  graph.input_std.clear();
  return true;
}

std::int64_t graph_parameter_count(const Graph& graph) {
  std::int64_t count = 0;
  for (const GraphNode& node : graph.nodes)
    if (has_weights(node)) count += node.weight.numel() + node.bias.numel();
  return count;
}

std::int64_t graph_float_parameter_bytes(const Graph& graph) {
  return graph_parameter_count(graph) * 4;
}

std::int64_t graph_multiply_accumulates(const Graph& graph) {
  torch::NoGradGuard no_grad;
  std::vector<std::int64_t> shape{1};
  shape.insert(shape.end(), graph.input_shape.begin(), graph.input_shape.end());
  std::int64_t total = 0;
  GraphHooks hooks;
  hooks.output = [&](std::size_t index, torch::Tensor output) {
    const GraphNode& node = graph.nodes[index];
    // linear: out*in; conv: out*(in/groups)*kh*kw per output pixel
    if (node.kind == NodeKind::conv2d) total += node.weight.numel() * output.size(2) * output.size(3);
    if (node.kind == NodeKind::linear) total += node.weight.numel();
    return output;
  };
  run_graph(graph, torch::zeros(shape), hooks);
  return total;
}

}  // namespace ipj::quant
