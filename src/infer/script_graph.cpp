// TorchScript source generation for graph IR (one statement per node, values named v<index>), and the
// normalisation wrapper of user modules.
#include "ipj/infer/script_graph.hpp"

#include <torch/jit.h>

#include <sstream>

#include "ipj/core/error.hpp"
#include "ipj/infer/script_program.hpp"

namespace ipj::infer {

// Frozen only: LibTorch 1.13's optimize_for_inference leaves graphs that do not load back after save
// ("required keyword attribute 'value' is undefined", measured 2026-12-03); loaders re-optimise anyway.
constexpr Freezing kSavedFreezing = Freezing::frozen;
namespace {

using quant::NodeKind;

std::string list(const quant::Pair& pair) {
  return "[" + std::to_string(pair[0]) + ", " + std::to_string(pair[1]) + "]";
}

std::string number(double value) {
  std::ostringstream text;
  text.precision(17);
  text << value;
  std::string result = text.str();
  if (result.find_first_of(".e") == std::string::npos && result.find("inf") == std::string::npos)
    result += ".0";
  return result;
}

// [C] -> [1, C, 1, ...] over a [B, ...sample] input (quant::normalize_by_dim1's rule); a flat sample's
// per-feature values (or one value) broadcast as they are.
std::string per_channel_view(std::size_t sample_rank) {
  if (sample_rank <= 1) return "";
  std::string view = ".view([1, -1";
  for (std::size_t dim = 1; dim < sample_rank; ++dim)
    view += ", 1";
  return view + "])";
}

// The expression of a node (its activation not applied); inputs are v<producer>, weights self.<prefix>w/b.
std::string node_expression(const quant::GraphNode& node, const std::string& prefix) {
  const std::string x = node.inputs.empty() ? "x" : "v" + std::to_string(node.inputs[0]);
  const std::string self = "self." + prefix;
  switch (node.kind) {
    case NodeKind::input:
      return "x";
    case NodeKind::conv2d:
      return "torch.conv2d(" + x + ", " + self + "w" + ", " + self + "b, " + list(node.stride) + ", " +
             list(node.padding) + ", " + list(node.dilation) + ", " + std::to_string(node.groups) + ")";
    case NodeKind::linear:
      return "torch.linear(" + x + ", " + self + "w, " + self + "b)";
    case NodeKind::add:
      return x + " + v" + std::to_string(node.inputs[1]);
    case NodeKind::clamp:
      return x;
    case NodeKind::max_pool2d:
      return "torch.max_pool2d(" + x + ", " + list(node.kernel) + ", " + list(node.stride) + ", " +
             list(node.padding) + ", " + list(node.dilation) + ", " + (node.ceil_mode ? "True" : "False") +
             ")";
    case NodeKind::avg_pool2d:
      return "torch.avg_pool2d(" + x + ", " + list(node.kernel) + ", " + list(node.stride) + ", " +
             list(node.padding) + ", " + (node.ceil_mode ? "True" : "False") + ", " +
             (node.count_include_pad ? "True" : "False") + ")";
    case NodeKind::adaptive_avg_pool2d:
      return "torch.adaptive_avg_pool2d(" + x + ", " + list(node.output_size) + ")";
    case NodeKind::flatten:
      return "torch.flatten(" + x + ", 1)";
  }
  fail(ErrorCategory::internal, "TorchScript export: node '" + node.name + "' of an unknown kind");
}

}  // namespace

torch::jit::Module script_graph(const quant::Graph& graph, Freezing freezing) {
  torch::jit::Module module("IpjExport");
  std::ostringstream source;
  source << "def forward(self, x: Tensor) -> Tensor:\n";
  const std::size_t rank = graph.input_shape.size();
  if (!graph.input_mean.empty()) {
    module.register_buffer("input_mean", torch::tensor(graph.input_mean));
    module.register_buffer("input_std", torch::tensor(graph.input_std));
    source << "    x = (x - self.input_mean" << per_channel_view(rank) << ") / self.input_std"
           << per_channel_view(rank) << "\n";
  }
  if (graph.input_padding > 0) {
    module.register_buffer("pad_value", torch::tensor(graph.input_pad_value).view({1, -1, 1, 1}));
    const std::string pad = std::to_string(graph.input_padding);
    source << "    x = torch.constant_pad_nd(x - self.pad_value, [" << pad << ", " << pad << ", " << pad
           << ", " << pad << "], 0.0) + self.pad_value\n";
  }
  for (std::size_t index = 0; index < graph.nodes.size(); ++index) {
    const quant::GraphNode& node = graph.nodes[index];
    const std::string prefix = "p" + std::to_string(index) + "_";  // node names contain dots
    std::string expression = node_expression(node, prefix);
    if (quant::has_weights(node)) {
      module.register_parameter(prefix + "w", node.weight.detach().clone(), false);
      module.register_parameter(prefix + "b", node.bias.detach().clone(), false);
    }
    if (node.activation.kind == quant::ActivationKind::relu) expression = "torch.relu(" + expression + ")";
    if (node.activation.kind == quant::ActivationKind::clamp)
      expression = "torch.clamp(" + expression + ", " + number(node.activation.min) + ", " +
                   number(node.activation.max) + ")";
    source << "    v" << index << " = " << expression << "\n";
  }
  source << "    return v" << graph.nodes.size() - 1 << "\n";
  try {
    module.define(source.str());
  } catch (const c10::Error& error) {
    fail(ErrorCategory::unsupported,
         std::string("TorchScript export: LibTorch rejects the generated module: ") +
             error.what_without_backtrace());
  }
  module.eval();
  return freeze_for_inference(module, freezing);
}

torch::jit::Module wrap_normalization(const torch::jit::Module& model, const std::vector<float>& mean,
                                      const std::vector<float>& std, std::size_t sample_rank) {
  if (mean.empty()) return freeze_for_inference(model, kSavedFreezing);
  torch::jit::Module wrapper("IpjNormalizedExport");
  wrapper.register_module("model", model.clone());
  wrapper.register_buffer("input_mean", torch::tensor(mean));
  wrapper.register_buffer("input_std", torch::tensor(std));
  const std::string view = per_channel_view(sample_rank);
  wrapper.define(
      "def forward(self, x: Tensor) -> Tensor:\n    return self.model.forward((x - self.input_mean" + view +
      ") / self.input_std" + view + ")\n");
  wrapper.eval();
  return freeze_for_inference(wrapper, kSavedFreezing);
}

}  // namespace ipj::infer
