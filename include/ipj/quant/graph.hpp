// ipj's graph IR: a model as a DAG of layers in topological order (conv2d with groups/stride/padding/dilation
// and BatchNorm folded, linear, add, clamp activations, max/avg/adaptive-avg pooling, flatten). The
// TorchScript importer and the zoo builders produce it; int8 conversion, pruning and the ONNX exporter
// consume it. Limits: one tensor input, one tensor output; nothing data-dependent (no control flow).
#pragma once

#include <torch/types.h>

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ipj::quant {

// Every node kind maps onto one ONNX operator (Conv, Gemm, Add, Relu/Clip, MaxPool, AveragePool,
// GlobalAveragePool, Flatten); `input` is the graph input.
enum class NodeKind {
  input,
  conv2d,
  linear,
  add,
  clamp,
  max_pool2d,
  avg_pool2d,
  adaptive_avg_pool2d,
  flatten
};
std::string node_kind_name(NodeKind kind);
// Throws ipj::Error(invalid_input) for an unknown name.
NodeKind parse_node_kind(const std::string& name);

// What happens to a node's output: nothing, relu (clamp to [0, inf)) or clamp to [min, max] (ReLU6 is [0,
// 6]).
enum class ActivationKind { none, relu, clamp };
struct Activation {
  ActivationKind kind = ActivationKind::none;
  double min = 0.0;  // clamp only
  double max = 0.0;
};

using Pair = std::array<std::int64_t, 2>;  // (height, width)

struct GraphNode {
  NodeKind kind = NodeKind::input;
  // Unique in the graph: the module path it came from ("layer1.0.conv1", "layer1.0.add"); the ONNX node and
  // output tensor name. Weights are "<name>.weight" and "<name>.bias".
  std::string name;
  std::vector<std::size_t> inputs;  // producer node indices, each smaller than this node's index
  Activation activation;            // conv2d, linear, add (fused) and clamp nodes
  torch::Tensor weight;             // conv2d: [out, in / groups, kh, kw]; linear: [out, in]; float32
  torch::Tensor bias;               // [out] float32 (zeros when the source had none)
  Pair kernel{1, 1};                // pools (conv: from the weight)
  Pair stride{1, 1};
  Pair padding{0, 0};  // symmetric, per side
  Pair dilation{1, 1};
  std::int64_t groups = 1;
  bool ceil_mode = false;         // max/avg pool
  bool count_include_pad = true;  // avg pool
  Pair output_size{1, 1};         // adaptive_avg_pool2d
};

struct Graph {
  std::string model_name;
  std::vector<std::int64_t> input_shape;  // per sample: [C, H, W] or [features]
  int num_classes = 0;                    // width of the output (0: unknown)
  // Preprocessing before node 0, x = (pixels - mean) / std per channel; empty when folded or absent.
  std::vector<float> input_mean;
  std::vector<float> input_std;
  // After folding the normalisation into a padded first convolution, the raw input is padded with the
  // per-channel mean (pixel units), so the fold stays exact at the borders (as LayerProgram does).
  std::int64_t input_padding = 0;
  std::vector<float> input_pad_value;
  std::vector<GraphNode> nodes;  // nodes[0] is the input; the last node is the output
};

bool has_weights(const GraphNode& node);  // conv2d, linear

// Observer/QAT hooks of run_graph: `weight` may replace a weight before use, `output` sees (and may replace)
// every node's output after its activation. Either may be empty.
struct GraphHooks {
  std::function<torch::Tensor(std::size_t, const torch::Tensor&)> weight;
  std::function<torch::Tensor(std::size_t, torch::Tensor)> output;
};

// input: [B, ...input_shape] (or [B, C, H, W] pixels for a flat input shape) -> [B, ...]. Applies the
// normalisation and input padding, then every node. Autograd flows when the weights need it.
torch::Tensor run_graph(const Graph& graph, const torch::Tensor& input, const GraphHooks& hooks = {});
// x: [B, ...] -> (x - mean) / std, with one value for every element or one per index of dim 1 (per channel
// of [B, C, ...], per feature of [B, F]): every ipj path that normalises a model's input uses this rule.
// Throws ipj::Error(usage) naming both counts when the values fit neither.
torch::Tensor normalize_by_dim1(const torch::Tensor& x, const std::vector<float>& mean,
                                const std::vector<float>& std);
// The node-0 value run_graph starts from: reshaped to [B, ...input_shape], normalised, padded.
torch::Tensor prepare_graph_input(const Graph& graph, const torch::Tensor& input);
// prepare_graph_input's values written straight into `out` without ATen's operators (a batch-1 call's
// dozen of them cost as much as a small model's arithmetic): [B, C, H+2p, W+2p] stored as NHWC, or [B, F].
// The same float operations in the same order, so bit for bit equal. Returns false, writing nothing, where
// it does not apply: the input not a contiguous float CPU tensor of B x the sample's elements, or
// normalisation / padding values of counts prepare_graph_input would broadcast otherwise or refuse.
bool write_graph_input_nhwc(const Graph& graph, const torch::Tensor& input, float* out);
torch::Tensor apply_activation(const Activation& activation, const torch::Tensor& x);
// One node in float (its activation not applied): inputs are the producers' values (the prepared input for
// the input node).
torch::Tensor run_graph_node(const GraphNode& node, const std::vector<torch::Tensor>& inputs,
                             const torch::Tensor& weight);

// For every node, the indices of the nodes that read it.
std::vector<std::vector<std::size_t>> graph_consumers(const Graph& graph);
// For every node, the index of its last reader (0 when none): when its value can be freed.
std::vector<std::size_t> graph_last_readers(const Graph& graph);
// Checks the invariants above (indices, names, arities, weight shapes); throws ipj::Error(invalid_input)
// naming `where` and the node. `require_weights` false: weighted nodes may lack float weights (int8 graphs).
void validate_graph(const Graph& graph, const std::string& where, bool require_weights = true);

// Removes the nodes marked in `erase`; readers of an erased node read `replacement[erased]` instead.
void erase_nodes(Graph& graph, const std::vector<bool>& erase, const std::vector<std::size_t>& replacement);
// Merges each clamp node into its producer (conv2d, linear, add) when that producer has no other reader.
void fuse_activations(Graph& graph);
// Folds input_mean/input_std into the first layer when the input feeds exactly one conv2d (groups 1) or one
// flatten -> linear; returns false (normalisation stays explicit) otherwise.
bool fold_input_normalization(Graph& graph);

std::int64_t graph_parameter_count(const Graph& graph);        // weights + biases
std::int64_t graph_float_parameter_bytes(const Graph& graph);  // as float32
std::int64_t graph_multiply_accumulates(const Graph& graph);   // per sample, conv2d and linear

}  // namespace ipj::quant
