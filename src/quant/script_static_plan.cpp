// The plan of static int8 on a frozen TorchScript graph (see script_static_plan.hpp): candidate nodes,
// calibration through a copy of the graph that also returns every observed value, and the border rule.
// Limits: only top-level nodes; conv2d with constant weights and int padding; linear with constant weights.
#include "script_static_plan.hpp"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <numeric>
#include <unordered_map>

#include "ipj/core/error.hpp"

namespace ipj::quant::static_plan {
namespace {

namespace jit = torch::jit;

bool is_op(const jit::Node* node, const char* name) {
  return node->kind() == c10::Symbol::fromQualString(name);
}

bool is_tensor(const jit::Value* value) {
  return value->type()->cast<c10::TensorType>() != nullptr;
}

c10::optional<c10::IValue> constant(jit::Value* value) {
  return jit::toIValue(value);
}

bool float_tensor_constant(jit::Value* value, std::int64_t dim) {
  const auto ivalue = constant(value);
  return ivalue && ivalue->isTensor() && ivalue->toTensor().dim() == dim &&
         ivalue->toTensor().scalar_type() == torch::kFloat;
}

bool none_or_float_constant(jit::Value* value) {
  const auto ivalue = constant(value);
  return ivalue && (ivalue->isNone() || (ivalue->isTensor() && ivalue->toTensor().dim() == 1 &&
                                         ivalue->toTensor().scalar_type() == torch::kFloat));
}

bool int_pair(jit::Value* value) {
  const auto ivalue = constant(value);
  return ivalue && ivalue->isIntList() &&
         (ivalue->toIntList().size() == 1 || ivalue->toIntList().size() == 2);
}

bool supported_conv(jit::Node* node) {
  if (!is_op(node, "aten::conv2d") || node->inputs().size() != 7) return false;
  const auto groups = constant(node->input(6));
  return is_tensor(node->input(0)) && float_tensor_constant(node->input(1), 4) &&
         none_or_float_constant(node->input(2)) && int_pair(node->input(3)) && int_pair(node->input(4)) &&
         int_pair(node->input(5)) && groups && groups->isInt();
}

bool supported_linear(jit::Node* node) {
  return is_op(node, "aten::linear") && node->inputs().size() == 3 && is_tensor(node->input(0)) &&
         float_tensor_constant(node->input(1), 2) && none_or_float_constant(node->input(2));
}

bool single_use(const jit::Value* value) {
  return value->uses().size() == 1;
}

bool supported_add(jit::Node* node) {
  const bool in_place = is_op(node, "aten::add_");
  if ((!in_place && !is_op(node, "aten::add")) || node->inputs().size() != 3) return false;
  const auto alpha = constant(node->input(2));
  return is_tensor(node->input(0)) && is_tensor(node->input(1)) && alpha && alpha->isInt() &&
         alpha->toInt() == 1 && (!in_place || single_use(node->input(0)));
}

bool is_relu(const jit::Node* node) {
  return is_op(node, "aten::relu") || is_op(node, "aten::relu_");
}

// Ops that LibTorch runs on quantized tensors, keeping the input's scale and zero point.
bool passthrough(jit::Node* node) {
  static const char* const kinds[] = {"aten::relu",       "aten::max_pool2d", "aten::adaptive_avg_pool2d",
                                      "aten::avg_pool2d", "aten::flatten",    "aten::reshape",
                                      "aten::hardtanh"};
  bool known = is_op(node, "aten::relu_");
  for (const char* kind : kinds)
    known = known || is_op(node, kind);
  return known && node->inputs().size() >= 1 && is_tensor(node->input(0)) && node->outputs().size() == 1 &&
         (!is_op(node, "aten::relu_") || single_use(node->input(0)));
}

jit::Node* fusable_relu(jit::Node* node) {
  if (!single_use(node->output())) return nullptr;
  jit::Node* user = node->output()->uses()[0].user;
  return is_relu(user) && user->owningBlock() == node->owningBlock() && user->input(0) == node->output()
             ? user
             : nullptr;
}

bool is_anchor(const Step& step) {
  return step.role != Role::passthrough;
}

std::vector<jit::Value*> step_inputs(const Step& step) {
  if (step.role == Role::add) return {step.node->input(0), step.node->input(1)};
  return {step.node->input(0)};
}

}  // namespace

Plan find_steps(const std::shared_ptr<jit::Graph>& graph) {
  Plan plan;
  std::set<const jit::Node*> fused;
  for (jit::Node* node : graph->nodes()) {
    if (fused.count(node)) continue;
    Step step;
    step.node = node;
    if (supported_conv(node))
      step.role = Role::conv;
    else if (supported_linear(node))
      step.role = Role::linear;
    else if (supported_add(node))
      step.role = Role::add;
    else if (!passthrough(node))
      continue;
    if (is_anchor(step)) step.relu = fusable_relu(node);
    if (step.relu) fused.insert(step.relu);
    plan.steps.push_back(step);
  }
  return plan;
}

void calibrate_plan(Plan& plan, const std::shared_ptr<jit::Graph>& graph, const c10::IValue& self,
                    const std::vector<torch::Tensor>& batches, const StaticScriptOptions& options) {
  std::vector<jit::Value*> watched;
  std::set<const jit::Value*> seen;
  std::set<const jit::Value*> needs_observer;
  for (const Step& step : plan.steps) {
    std::vector<jit::Value*> values = step_inputs(step);
    values.push_back(step.output());
    for (jit::Value* value : values) {
      if (seen.insert(value).second) watched.push_back(value);
      if (is_anchor(step)) needs_observer.insert(value);
    }
  }
  // A copy of the graph that returns (its output, every watched value); values map by position.
  std::shared_ptr<jit::Graph> copy = graph->copy();
  std::unordered_map<const jit::Value*, jit::Value*> mapped;
  for (std::size_t index = 0; index < graph->inputs().size(); ++index)
    mapped[graph->inputs()[index]] = copy->inputs()[index];
  auto copied = copy->nodes().begin();
  for (jit::Node* node : graph->nodes()) {
    for (std::size_t index = 0; index < node->outputs().size(); ++index)
      mapped[node->output(index)] = copied->output(index);
    ++copied;
  }
  std::vector<jit::Value*> returned{copy->outputs().begin(), copy->outputs().end()};
  const std::size_t first_watched = returned.size();
  for (jit::Value* value : watched)
    returned.push_back(mapped.at(value));
  jit::Node* tuple = copy->appendNode(copy->createTuple(returned));
  while (!copy->outputs().empty())
    copy->eraseOutput(0);
  copy->registerOutput(tuple->output());
  jit::GraphFunction function("ipj_static_calibration", copy, nullptr);
  for (jit::Value* value : watched) {
    Observed& observed = plan.values[value];
    if (needs_observer.count(value))
      observed.observer = std::make_shared<ActivationObserver>(options.observer, options.percentile);
  }
  for (const torch::Tensor& batch : batches) {
    jit::Stack stack{self, batch};
    function.run(stack);
    const c10::ivalue::Tuple& tuple = stack.back().toTupleRef();
    for (std::size_t index = 0; index < watched.size(); ++index) {
      Observed& observed = plan.values[watched[index]];
      const c10::IValue& value = tuple.elements()[first_watched + index];
      if (!value.isTensor() || value.toTensor().scalar_type() != torch::kFloat) {
        observed.is_float = false;
        continue;
      }
      const torch::Tensor tensor = value.toTensor();
      if (observed.shape.empty()) {
        observed.shape = tensor.sizes().vec();
        const bool batch_major = tensor.dim() > 0 && tensor.size(0) == batch.size(0) && batch.size(0) > 0;
        observed.per_sample = batch_major ? tensor.numel() / batch.size(0) : tensor.numel();
      }
      if (observed.observer) observed.observer->observe(tensor);
    }
  }
}

bool reads_quantized(const Plan& plan, const jit::Node* node) {
  if (is_op(node, "aten::size") || is_op(node, "aten::dim")) return true;
  for (const Step& step : plan.steps)
    if (step.active && (step.node == node || step.relu == node)) return true;
  return false;
}

namespace {

// Shapes and dtypes the quantized kernels take; sets each conv/linear's MACs per sample.
void check_observed(Plan& plan) {
  for (Step& step : plan.steps) {
    for (jit::Value* value : step_inputs(step)) {
      const Observed& observed = plan.values[value];
      if (!observed.is_float || observed.shape.empty()) step.enabled = false;
    }
    if (!plan.values[step.output()].is_float) step.enabled = false;
    const std::vector<std::int64_t>& in = plan.values[step.node->input(0)].shape;
    const std::int64_t out = plan.values[step.output()].per_sample;
    const torch::Tensor weight = step.role == Role::conv || step.role == Role::linear
                                     ? constant(step.node->input(1))->toTensor()
                                     : torch::Tensor();
    if (step.role == Role::conv) {
      if (in.size() != 4) step.enabled = false;
      step.macs = out * (weight.numel() / weight.size(0));
    } else if (step.role == Role::linear) {
      if (in.size() < 2) step.enabled = false;
      step.macs = out * weight.size(1);
    } else if (step.role == Role::add) {
      if (in != plan.values[step.node->input(1)].shape) step.enabled = false;
    } else if (!is_op(step.node, "aten::flatten") && !is_op(step.node, "aten::reshape") && in.size() != 4 &&
               !is_relu(step.node)) {
      step.enabled = false;  // pooling and hardtanh: 4-D only
    }
    if (!step.enabled && step.reason.empty())
      step.reason = "input shape or dtype the int8 kernel does not take";
  }
}

// Marks the steps that run quantized given `enabled`; returns the quantized values and their producers.
std::unordered_map<const jit::Value*, std::size_t> propagate(Plan& plan) {
  std::unordered_map<const jit::Value*, std::size_t> producer;
  for (std::size_t index = 0; index < plan.steps.size(); ++index) {
    Step& step = plan.steps[index];
    bool inputs_quantized = true;
    for (jit::Value* value : step_inputs(step))
      inputs_quantized = inputs_quantized && producer.count(value);
    step.active = step.enabled && (step.role == Role::conv || step.role == Role::linear || inputs_quantized);
    if (step.active) producer[step.output()] = index;
  }
  return producer;
}

std::size_t root_of(std::vector<std::size_t>& parent, std::size_t index) {
  while (parent[index] != index)
    index = parent[index] = parent[parent[index]];
  return index;
}

// One pass of the border rule; returns whether a region was demoted.
bool demote_slow_regions(Plan& plan, bool every_region, std::int64_t& kept) {
  const auto producer = propagate(plan);
  std::vector<std::size_t> parent(plan.steps.size());
  std::iota(parent.begin(), parent.end(), 0);
  for (std::size_t index = 0; index < plan.steps.size(); ++index) {
    if (!plan.steps[index].active) continue;
    for (jit::Value* value : step_inputs(plan.steps[index])) {
      const auto found = producer.find(value);
      if (found != producer.end()) parent[root_of(parent, index)] = root_of(parent, found->second);
    }
  }
  std::map<std::size_t, std::int64_t> macs, border, calls;
  std::set<std::pair<std::size_t, const jit::Value*>> counted;
  for (std::size_t index = 0; index < plan.steps.size(); ++index) {
    const Step& step = plan.steps[index];
    if (!step.active) continue;
    const std::size_t root = root_of(parent, index);
    macs[root] += step.macs;
    if (is_anchor(step)) ++calls[root];
    for (jit::Value* value : step_inputs(step))
      if (!producer.count(value) && counted.insert({root, value}).second)
        border[root] += plan.values[value].per_sample;
    bool leaves = false;
    for (const jit::Use& use : step.output()->uses())
      leaves = leaves || !reads_quantized(plan, use.user);
    if (leaves) border[root] += plan.values[step.output()].per_sample;
  }
  bool demoted = false;
  kept = 0;
  for (const auto& [root, region_macs] : macs) {
    const double cost = kBorderMacsPerElement * static_cast<double>(border[root]) +
                        kMacsPerInt8Call * static_cast<double>(calls[root]);
    if (every_region || static_cast<double>(region_macs) >= cost) {
      ++kept;
      continue;
    }
    demoted = true;
    const std::string reason = "border rule: its int8 region does " + std::to_string(region_macs) +
                               " MACs per sample for " + std::to_string(border[root]) +
                               " elements quantized or dequantized at its borders and " +
                               std::to_string(calls[root]) + " int8 kernel calls";
    for (std::size_t index = 0; index < plan.steps.size(); ++index)
      if (plan.steps[index].active && root_of(parent, index) == root) {
        plan.steps[index].enabled = false;
        plan.steps[index].reason = reason;
      }
  }
  return demoted;
}

}  // namespace

std::int64_t settle_plan(Plan& plan, bool every_region) {
  check_observed(plan);
  std::int64_t kept = 0;
  while (demote_slow_regions(plan, every_region, kept)) {
  }
  propagate(plan);
  return kept;
}

}  // namespace ipj::quant::static_plan
