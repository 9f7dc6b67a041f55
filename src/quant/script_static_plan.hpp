// Private to the quant module: the plan of static int8 on a frozen TorchScript graph (script_static.hpp):
// which top-level nodes can run quantized, what calibration observed on their values, and which connected
// regions the border rule keeps. Ops inside sub-blocks (if/loop bodies) always stay float.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "ipj/quant/observer.hpp"
#include "ipj/quant/script_static.hpp"

namespace ipj::quant::static_plan {

enum class Role { conv, linear, add, passthrough };

struct Step {
  torch::jit::Node* node = nullptr;
  Role role = Role::passthrough;
  torch::jit::Node* relu = nullptr;  // a relu fused into the kernel (the node's only consumer)
  bool enabled = true;               // false: demoted to float (border rule, unsupported shapes, ...)
  bool active = false;               // runs quantized in the current plan
  std::int64_t macs = 0;             // per sample (conv, linear)
  std::string reason;                // why a conv/linear stays float
  torch::jit::Value* output() const { return relu ? relu->output() : node->output(); }
};

struct Observed {
  std::vector<std::int64_t> shape;  // of the first calibration batch
  bool is_float = true;
  std::int64_t per_sample = 0;  // elements per sample
  std::shared_ptr<ActivationObserver> observer;
};

struct Plan {
  std::vector<Step> steps;
  std::map<const torch::jit::Value*, Observed> values;  // what calibration saw
};

// Candidate steps of the graph's top-level block, in order.
Plan find_steps(const std::shared_ptr<torch::jit::Graph>& graph);
// The values the plan quantizes (its anchors' inputs and outputs) observed on `batches`; `self` is the
// frozen module's object (the graph's first input).
void calibrate_plan(Plan& plan, const std::shared_ptr<torch::jit::Graph>& graph, const c10::IValue& self,
                    const std::vector<torch::Tensor>& batches, const StaticScriptOptions& options);
// Demotes steps whose observed shapes or dtypes LibTorch's quantized kernels do not take, then regions that
// fail the border rule; sets `active`. Returns the number of regions kept.
std::int64_t settle_plan(Plan& plan, bool every_region);
// Every node that reads a quantized value without needing a dequantize first (active steps, fused relus,
// aten::size/dim).
bool reads_quantized(const Plan& plan, const torch::jit::Node* node);

}  // namespace ipj::quant::static_plan
