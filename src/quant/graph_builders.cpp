// Builders of graph IR for ipj's zoo models. The ResNet builder follows src/models/resnet.cpp: a 3x3 stride-1
// stem, stages of basic (conv1, conv2) or bottleneck (conv1, conv2, conv3) blocks with a projection shortcut
// ("shortcut.0" conv + "shortcut.1" BN) where the shape changes, global average pooling, fc.
#include "ipj/quant/graph_builders.hpp"

#include <torch/torch.h>

#include <map>

#include "ipj/core/error.hpp"
#include "ipj/models/catalog.hpp"

namespace ipj::quant {
namespace {

class ResNetBuilder {
 public:
  explicit ResNetBuilder(models::Classifier& model) {
    for (const auto& item : model.named_parameters(true))
      tensors_[item.key()] = item.value().detach().to(torch::kFloat).clone();
    for (const auto& item : model.named_buffers(true))
      tensors_[item.key()] = item.value().detach().to(torch::kFloat).clone();
    GraphNode input;
    input.name = "input";
    graph_.nodes.push_back(input);
  }
  bool has(const std::string& name) const { return tensors_.count(name) > 0; }

  // conv (no bias) + BatchNorm folded: w' = w * gamma / sqrt(var + eps), b' = beta - mean * that.
  std::size_t conv_bn(const std::string& conv, const std::string& bn, std::size_t input, std::int64_t stride,
                      bool relu) {
    const double eps = 1e-5;  // torch::nn::BatchNorm2d's default, used by ipj's models
    GraphNode node;
    node.kind = NodeKind::conv2d;
    node.name = conv;
    const torch::Tensor weight = at(conv + ".weight");  // [out, in, k, k]
    const torch::Tensor factor = at(bn + ".weight") / torch::sqrt(at(bn + ".running_var") + eps);  // [out]
    node.weight = weight * factor.view({-1, 1, 1, 1});
    node.bias = at(bn + ".bias") - at(bn + ".running_mean") * factor;
    node.stride = {stride, stride};
    node.padding = {weight.size(2) / 2, weight.size(3) / 2};
    if (relu) node.activation.kind = ActivationKind::relu;
    return push(std::move(node), {input});
  }
  std::size_t add_relu(const std::string& name, std::size_t left, std::size_t right) {
    GraphNode node;
    node.kind = NodeKind::add;
    node.name = name;
    node.activation.kind = ActivationKind::relu;
    return push(std::move(node), {left, right});
  }
  std::size_t block(const std::string& prefix, std::size_t input, std::int64_t stride, bool bottleneck) {
    std::size_t out;
    if (bottleneck) {
      out = conv_bn(prefix + ".conv1", prefix + ".bn1", input, 1, true);
      out = conv_bn(prefix + ".conv2", prefix + ".bn2", out, stride, true);
      out = conv_bn(prefix + ".conv3", prefix + ".bn3", out, 1, false);
    } else {
      out = conv_bn(prefix + ".conv1", prefix + ".bn1", input, stride, true);
      out = conv_bn(prefix + ".conv2", prefix + ".bn2", out, 1, false);
    }
    std::size_t shortcut = input;
    if (has(prefix + ".shortcut.0.weight"))
      shortcut = conv_bn(prefix + ".shortcut.0", prefix + ".shortcut.1", input, stride, false);
    return add_relu(prefix + ".add", out, shortcut);
  }
  Graph finish(std::size_t features) {
    GraphNode pool;
    pool.kind = NodeKind::adaptive_avg_pool2d;
    pool.name = "avgpool";
    const std::size_t pooled = push(std::move(pool), {features});
    GraphNode flatten;
    flatten.kind = NodeKind::flatten;
    flatten.name = "flatten";
    const std::size_t flat = push(std::move(flatten), {pooled});
    GraphNode fc;
    fc.kind = NodeKind::linear;
    fc.name = "fc";
    fc.weight = at("fc.weight");
    fc.bias = at("fc.bias");
    push(std::move(fc), {flat});
    return std::move(graph_);
  }

 private:
  std::map<std::string, torch::Tensor> tensors_;
  Graph graph_;
  torch::Tensor at(const std::string& name) const {
    const auto found = tensors_.find(name);
    if (found == tensors_.end())
      fail(ErrorCategory::invalid_input,
           "resnet checkpoint has no tensor '" + name + "' (from another ipj?)");
    return found->second;
  }
  std::size_t push(GraphNode node, std::vector<std::size_t> inputs) {
    node.inputs = std::move(inputs);
    graph_.nodes.push_back(std::move(node));
    return graph_.nodes.size() - 1;
  }
};

Graph resnet_graph(models::Classifier& model) {
  torch::NoGradGuard no_grad;
  ResNetBuilder builder(model);
  std::size_t x = builder.conv_bn("stem_conv", "stem_bn", 0, 1, true);
  for (int stage = 1; stage <= 4; ++stage) {
    for (int block = 0;; ++block) {
      const std::string prefix = "layer" + std::to_string(stage) + "." + std::to_string(block);
      if (!builder.has(prefix + ".conv1.weight")) break;
      const std::int64_t stride = stage > 1 && block == 0 ? 2 : 1;
      x = builder.block(prefix, x, stride, builder.has(prefix + ".conv3.weight"));
    }
  }
  return builder.finish(x);
}

}  // namespace

Graph graph_from_program(const LayerProgram& program) {
  Graph graph;
  graph.model_name = program.model_name;
  graph.input_shape = program.input_shape;
  graph.num_classes = program.num_classes;
  graph.input_padding = program.input_padding;
  graph.input_pad_value = program.input_pad_value;
  GraphNode input;
  input.name = "input";
  graph.nodes.push_back(input);
  for (std::size_t index = 0; index < program.layers.size(); ++index) {
    const Layer& layer = program.layers[index];
    GraphNode node;
    node.inputs = {graph.nodes.size() - 1};
    node.name = layer_kind_name(layer.kind) + std::to_string(index);
    node.weight = layer.weight;
    node.bias = layer.bias;
    node.stride = {layer.stride, layer.stride};
    node.padding = {layer.padding, layer.padding};
    if (layer.relu) node.activation.kind = ActivationKind::relu;
    switch (layer.kind) {
      case LayerKind::linear:
        node.kind = NodeKind::linear;
        break;
      case LayerKind::conv2d:
        node.kind = NodeKind::conv2d;
        break;
      case LayerKind::max_pool2d:
        node.kind = NodeKind::max_pool2d;
        node.kernel = {layer.pool, layer.pool};
        node.stride = node.kernel;
        break;
      case LayerKind::flatten:
        node.kind = NodeKind::flatten;
        break;
    }
    if (layer.relu && !has_weights(node)) {  // a standalone ReLU after a pool or flatten
      GraphNode relu;
      relu.kind = NodeKind::clamp;
      relu.name = node.name + ".relu";
      relu.activation.kind = ActivationKind::relu;
      node.activation = Activation{};
      graph.nodes.push_back(std::move(node));
      relu.inputs = {graph.nodes.size() - 1};
      node = std::move(relu);
    }
    graph.nodes.push_back(std::move(node));
  }
  validate_graph(graph, program.model_name);
  return graph;
}

Graph extract_graph(models::Classifier& model, const Json& model_info) {
  if (!model_info.is_object() || !model_info.contains("name"))
    fail(ErrorCategory::invalid_input,
         "the checkpoint has no model_info (written by ipj >= 0.1 train); retrain it with this ipj");
  const std::string name = model_info.at("name").get<std::string>();
  const models::ModelEntry* entry = models::find_model_entry(name);
  const models::GraphBuilder builder = entry ? entry->graph : models::GraphBuilder::none;
  if (builder == models::GraphBuilder::from_layer_program)
    return graph_from_program(extract_program(model, model_info));
  if (builder != models::GraphBuilder::resnet) {
    std::string known;
    for (const models::ModelEntry& each : models::model_catalog())
      if (each.has_graph()) known += (known.empty() ? "" : ", ") + each.name;
    fail(ErrorCategory::unsupported, "model '" + name + "' has no graph builder (" + known + ")");
  }
  Graph graph = resnet_graph(model);
  graph.model_name = name;
  graph.input_shape = model_info.at("input_shape").get<std::vector<std::int64_t>>();
  graph.num_classes = model_info.at("num_classes").get<int>();
  graph.input_mean = model_info.at("mean").get<std::vector<float>>();
  graph.input_std = model_info.at("std").get<std::vector<float>>();
  fold_input_normalization(graph);
  validate_graph(graph, name);
  return graph;
}

}  // namespace ipj::quant
