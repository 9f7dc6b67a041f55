// Pruning of graph IR: magnitude (any conv/linear) and structured (output channels of the conv/linear nodes
// whose channels reach only dense conv/linear readers, through activations, pools and flatten; channels tied
// by a residual add, a depthwise conv or the graph output stay), and fine-tuning of the float graph.
#include <torch/torch.h>

#include <cmath>
#include <string>

#include "ipj/core/error.hpp"
#include "ipj/quant/prune.hpp"
#include "program_training.hpp"

namespace ipj::quant {
namespace {

bool passes_channels_through(NodeKind kind) {
  return kind == NodeKind::clamp || kind == NodeKind::max_pool2d || kind == NodeKind::avg_pool2d ||
         kind == NodeKind::adaptive_avg_pool2d || kind == NodeKind::flatten;
}

// The per-sample output shape of every node (one zero sample through the graph).
std::vector<std::vector<std::int64_t>> node_shapes(const Graph& graph) {
  torch::NoGradGuard no_grad;
  std::vector<std::vector<std::int64_t>> shapes(graph.nodes.size());
  std::vector<std::int64_t> input{1};
  input.insert(input.end(), graph.input_shape.begin(), graph.input_shape.end());
  GraphHooks hooks;
  hooks.output = [&](std::size_t index, torch::Tensor output) {
    shapes[index] = output.sizes().slice(1).vec();
    return output;
  };
  run_graph(graph, torch::zeros(input), hooks);
  return shapes;
}

// A dense conv/linear that reads the channels of a pruned node, and how many of its inputs each channel
// feeds (1, or H*W after a flatten).
struct ChannelReader {
  std::size_t node;
  std::int64_t per_channel;
};

// The readers of `producer`'s channels; returns "" when its channels can be removed, else what ties them
// (e.g. "residual add 'layer1.0.add'", "depthwise conv 'features.2.conv.1.0'", "the graph output").
std::string channel_readers(const Graph& graph, const std::vector<std::vector<std::size_t>>& readers,
                            const std::vector<std::vector<std::int64_t>>& shapes, std::size_t producer,
                            std::int64_t per_channel, std::vector<ChannelReader>& found) {
  if (producer + 1 == graph.nodes.size()) return "the graph output";  // keeps its width
  for (const std::size_t reader : readers[producer]) {
    const GraphNode& node = graph.nodes[reader];
    if (node.kind == NodeKind::conv2d && node.groups == 1) {
      found.push_back({reader, 1});
    } else if (node.kind == NodeKind::linear) {
      found.push_back({reader, per_channel});
    } else if (passes_channels_through(node.kind)) {
      const auto& shape = shapes[producer];  // [C, H, W] before a flatten
      const std::int64_t next =
          node.kind == NodeKind::flatten && shape.size() == 3 ? shape[1] * shape[2] : per_channel;
      std::string blocker = channel_readers(graph, readers, shapes, reader, next, found);
      if (!blocker.empty()) return blocker;
    } else if (node.kind == NodeKind::add) {
      return "residual add '" + node.name + "'";  // channels tied to another branch
    } else {
      return (node.kind == NodeKind::conv2d ? "grouped/depthwise conv '" : node_kind_name(node.kind) + " '") +
             node.name + "'";
    }
  }
  return "";
}

}  // namespace

Graph prune_structured(const Graph& graph, double fraction, std::string* tied) {
  if (!(fraction >= 0.0 && fraction < 1.0)) fail(ErrorCategory::usage, "--sparsity must be in [0, 1)");
  torch::NoGradGuard no_grad;
  Graph pruned = graph;
  const auto readers = graph_consumers(graph);
  const auto shapes = node_shapes(graph);
  int pruned_nodes = 0;
  std::string kept;  // "'conv1' (feeds residual add 'layer1.0.add')", ... for the message below
  for (std::size_t index = 0; index < pruned.nodes.size(); ++index) {
    GraphNode& node = pruned.nodes[index];
    if (!has_weights(node)) continue;
    std::vector<ChannelReader> found;
    const std::string blocker = node.groups != 1 ? "is a grouped/depthwise conv"
                                                 : channel_readers(graph, readers, shapes, index, 1, found);
    if (!blocker.empty()) {
      const std::string why = node.groups != 1 ? blocker : "feeds " + blocker;
      if (kept.size() < 400)
        kept += (kept.empty() ? "" : "; ") + ("'" + node.name + "' " + why);
      else if (kept.size() < 405)
        kept += "; ...";
      continue;
    }
    const std::int64_t outputs = node.weight.size(0);
    const auto keep_count =
        std::max<std::int64_t>(1, static_cast<std::int64_t>(std::lround(outputs * (1.0 - fraction))));
    // L1 norm of each output unit / channel: w [out, ...] -> [out]
    const torch::Tensor norms = node.weight.abs().reshape({outputs, -1}).sum(1);
    const torch::Tensor keep = std::get<0>(std::get<1>(norms.topk(keep_count)).sort());  // ascending
    node.weight = node.weight.index_select(0, keep).contiguous();
    node.bias = node.bias.index_select(0, keep).contiguous();
    for (const ChannelReader& reader : found) {
      GraphNode& next = pruned.nodes[reader.node];
      // conv [out, in, kh, kw] / linear [out, in]; after a flatten each channel owns per_channel inputs
      const torch::Tensor columns = (keep.view({-1, 1}) * reader.per_channel +
                                     torch::arange(reader.per_channel, torch::kLong).view({1, -1}))
                                        .reshape({-1});
      next.weight = next.weight.index_select(1, columns).contiguous();
    }
    ++pruned_nodes;
  }
  if (pruned_nodes == 0)
    fail(ErrorCategory::unsupported, "structured pruning cannot remove channels from '" + graph.model_name +
                                         "': the channels of every conv/linear are tied (" + kept +
                                         "). Use magnitude pruning (omit --structured)");
  pruned.model_name = graph.model_name + "-pruned";
  if (tied != nullptr) *tied = kept;
  return pruned;
}

std::vector<torch::Tensor> prune_magnitude(Graph& graph, double sparsity) {
  if (!(sparsity >= 0.0 && sparsity < 1.0)) fail(ErrorCategory::usage, "--sparsity must be in [0, 1)");
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> masks(graph.nodes.size());
  for (std::size_t index = 0; index < graph.nodes.size(); ++index) {
    GraphNode& node = graph.nodes[index];
    if (!has_weights(node)) continue;
    const auto pruned_count = static_cast<std::int64_t>(std::floor(node.weight.numel() * sparsity));
    torch::Tensor mask = torch::ones_like(node.weight);
    if (pruned_count > 0) {
      const torch::Tensor order = node.weight.abs().reshape({-1}).argsort();
      mask.view({-1}).index_fill_(0, order.slice(0, 0, pruned_count), 0.0);
    }
    node.weight = node.weight * mask;
    masks[index] = mask;
  }
  return masks;
}

double weight_sparsity(const Graph& graph) {
  std::int64_t zeros = 0, total = 0;
  for (const GraphNode& node : graph.nodes) {
    if (!has_weights(node)) continue;
    zeros += node.weight.eq(0).sum().item<std::int64_t>();
    total += node.weight.numel();
  }
  return total ? static_cast<double>(zeros) / static_cast<double>(total) : 0.0;
}

void fine_tune(Graph& graph, const data::ImageSet& images, int epochs, double learning_rate,
               std::int64_t batch_size, std::uint64_t seed, bool show_progress,
               const std::vector<torch::Tensor>& masks) {
  const std::vector<torch::Tensor> parameters = make_trainable(graph);
  const PixelTraining settings{epochs, learning_rate, batch_size, seed, "fine-tune", show_progress};
  auto loss = [&](const data::Batch& batch, const train::StepContext&) {
    const torch::Tensor logits = run_graph(graph, batch.images);  // [B, classes]
    return train::StepLoss{torch::nn::functional::cross_entropy(logits, batch.labels), logits};
  };
  auto keep_pruned_weights_at_zero = [&] {
    torch::NoGradGuard no_grad;
    for (std::size_t index = 0; index < graph.nodes.size(); ++index)
      if (masks[index].defined()) graph.nodes[index].weight.mul_(masks[index]);
  };
  train_on_pixels(images, settings, parameters, loss,
                  masks.empty() ? std::function<void()>() : keep_pruned_weights_at_zero);
  freeze(graph);
}

}  // namespace ipj::quant
