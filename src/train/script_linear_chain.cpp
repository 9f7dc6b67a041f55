// Finds the Linear chain in a user's TorchScript module (scripted or traced) so that the linear-chain step
// can train it: the forward graph, inlined and constant-propagated, must read flatten/view(B, -1), then
// linear (+ relu) ... linear, on the module's own trainable parameters (dropout only where it passes values
// through). Anything else (active dropout, BatchNorm, residuals, tied or frozen weights, a Linear without
// bias) leaves the model to autograd.
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/inliner.h>

#include <numeric>
#include <optional>
#include <unordered_set>

#include "ipj/core/log.hpp"
#include "ipj/models/script_classifier.hpp"
#include "ipj/train/linear_chain_step.hpp"

namespace ipj::train {
namespace {

namespace jit = torch::jit;

// Nodes that compute no tensor of the chain: constants, attribute reads (checked where a linear uses
// them), shape lists and batch sizes (checked where a view uses them).
bool is_bookkeeping(const jit::Node* node) {
  static const std::unordered_set<jit::Symbol> kinds = {jit::prim::Constant,      jit::prim::GetAttr,
                                                        jit::prim::ListConstruct, jit::aten::size,
                                                        jit::prim::NumToTensor,   jit::aten::Int};
  return kinds.count(node->kind()) > 0;
}

std::optional<std::int64_t> constant_int(const jit::Value* value) {
  const auto constant = jit::toIValue(value);
  if (!constant || !constant->isInt()) return std::nullopt;
  return constant->toInt();
}

// True when `value` is x.size(0) of the graph's input, directly (scripted) or through the tracer's
// NumToTensor / Int pair.
bool is_batch_size(const jit::Value* value, const jit::Value* input) {
  const jit::Node* node = value->node();
  if (node->kind() == jit::aten::Int && node->input(0)->node()->kind() == jit::prim::NumToTensor)
    node = node->input(0)->node()->input(0)->node();
  return node->kind() == jit::aten::size && node->inputs().size() == 2 && node->input(0) == input &&
         constant_int(node->input(1)) == 0;
}

// flatten(x, 1, -1) or view/reshape(x, [B or -1, -1 or features]) of the [B, ...] input: [B, features].
bool flattens_rows(const jit::Node* node, const jit::Value* input, std::int64_t features) {
  if (node->kind() == jit::aten::flatten)
    return node->inputs().size() == 3 && constant_int(node->input(1)) == 1 &&
           constant_int(node->input(2)) == -1;
  if (node->kind() != jit::aten::view && node->kind() != jit::aten::reshape) return false;
  const jit::Node* shape = node->input(1)->node();
  if (shape->kind() != jit::prim::ListConstruct || shape->inputs().size() != 2) return false;
  const bool rows_kept = is_batch_size(shape->input(0), input) || constant_int(shape->input(0)) == -1;
  const auto columns = constant_int(shape->input(1));
  const bool columns_flat = columns == features || (columns == -1 && constant_int(shape->input(0)) != -1);
  return rows_kept && columns_flat;
}

// dropout(x, p, train) that passes x through: train false (a module traced in eval mode records it so) or
// p = 0.
bool is_inactive_dropout(const jit::Node* node) {
  if (node->kind() != jit::aten::dropout || node->inputs().size() != 3) return false;
  const auto rate = jit::toIValue(node->input(1));
  const auto train = jit::toIValue(node->input(2));
  return (train && train->isBool() && !train->toBool()) ||
         (rate && rate->isDouble() && rate->toDouble() == 0.0);
}

// The tensor a chain of prim::GetAttr nodes reads from `self`, or an undefined tensor.
torch::Tensor attribute_tensor(const jit::Value* value, const jit::Value* self, const jit::Module& module) {
  std::vector<std::string> path;
  for (; value != self; value = value->node()->input(0)) {
    if (value->node()->kind() != jit::prim::GetAttr) return {};
    path.push_back(value->node()->s(jit::attr::name));
  }
  jit::Module owner = module;
  for (auto name = path.rbegin(); name != path.rend(); ++name) {
    if (!owner.hasattr(*name)) return {};
    const c10::IValue attribute = owner.attr(*name);
    if (name + 1 == path.rend()) return attribute.isTensor() ? attribute.toTensor() : torch::Tensor();
    if (!attribute.isModule()) return {};
    owner = attribute.toModule();
  }
  return {};
}

// The parameters of the step: trainable fp32 CPU tensors of the module, each used once.
bool usable_parameter(const torch::Tensor& tensor, std::unordered_set<const c10::TensorImpl*>& seen) {
  return tensor.defined() && tensor.requires_grad() && tensor.scalar_type() == torch::kFloat32 &&
         tensor.is_contiguous() && tensor.device().is_cpu() &&
         seen.insert(tensor.unsafeGetTensorImpl()).second;
}

std::optional<std::vector<ChainLayer>> match_chain(const jit::Graph& graph, const jit::Module& module,
                                                   const std::vector<std::int64_t>& sample_shape) {
  if (graph.inputs().size() != 2 || graph.outputs().size() != 1) return std::nullopt;
  const jit::Value* self = graph.inputs()[0];
  const jit::Value* input = graph.inputs()[1];
  const std::int64_t features =
      std::accumulate(sample_shape.begin(), sample_shape.end(), std::int64_t{1}, std::multiplies<>());
  const jit::Value* current = input;  // the chain's value so far
  bool flat = sample_shape.size() == 1;
  std::vector<ChainLayer> layers;
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const jit::Node* node : graph.nodes()) {
    if (is_bookkeeping(node)) continue;
    if (node->inputs().empty() || node->input(0) != current || node->outputs().size() != 1)
      return std::nullopt;
    const jit::Symbol kind = node->kind();
    if (layers.empty() && flattens_rows(node, input, features)) {
      flat = true;
    } else if (kind == jit::aten::linear && flat && node->inputs().size() == 3) {
      ChainLayer layer{attribute_tensor(node->input(1), self, module),
                       attribute_tensor(node->input(2), self, module), false};
      if (!usable_parameter(layer.weight, seen) || !usable_parameter(layer.bias, seen)) return std::nullopt;
      const std::int64_t in = layers.empty() ? features : layers.back().weight.size(0);
      if (layer.weight.dim() != 2 || layer.weight.size(1) != in || layer.bias.dim() != 1 ||
          layer.bias.size(0) != layer.weight.size(0))
        return std::nullopt;
      layers.push_back(layer);
    } else if ((kind == jit::aten::relu || kind == jit::aten::relu_) && !layers.empty() &&
               !layers.back().relu && node->input(0)->node()->kind() == jit::aten::linear) {
      layers.back().relu = true;
    } else if (kind != jit::aten::contiguous && !is_inactive_dropout(node)) {
      return std::nullopt;
    }
    current = node->output();
  }
  if (layers.empty() || layers.back().relu || graph.outputs()[0] != current) return std::nullopt;
  return layers;
}

}  // namespace

std::optional<std::vector<ChainLayer>> script_linear_chain_layers(const models::ScriptClassifier& model) {
  const jit::Module& module = model.module();
  if (!module.find_method("forward")) return std::nullopt;
  std::shared_ptr<jit::Graph> graph = module.get_method("forward").graph()->copy();
  try {
    jit::Inline(*graph);
    jit::ConstantPropagation(graph);
    jit::EliminateDeadCode(graph);
  } catch (const std::exception& error) {
    spdlog::debug("'{}': no linear chain (the forward graph did not simplify: {})", model.path(),
                  error.what());
    return std::nullopt;
  }
  auto layers = match_chain(*graph, module, model.sample_shape());
  spdlog::debug(
      "'{}': {}", model.path(),
      layers ? "a chain of " + std::to_string(layers->size()) + " Linear layers (the linear-chain step)"
             : std::string("not a plain Linear chain (trained through autograd)"));
  return layers;
}

}  // namespace ipj::train
