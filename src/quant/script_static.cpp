// Static int8 of any TorchScript module (see script_static.hpp): freezing, the rewrite of the planned
// regions into PyTorch's quantized TorchScript form, and the checks that the result runs. Limits: weights
// per output channel (symmetric qint8), activations per tensor (affine quint8); a plan LibTorch cannot run
// is simplified (isolated conv/linear, then nothing in int8) rather than refused.
#include "ipj/quant/script_static.hpp"

#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/freeze_module.h>
#include <torch/csrc/jit/passes/frozen_graph_optimizations.h>
#include <torch/csrc/jit/passes/graph_rewrite_helper.h>
#include <torch/csrc/jit/passes/remove_dropout.h>
#include <torch/csrc/jit/passes/shape_analysis.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <unordered_map>

#include "ipj/core/error.hpp"
#include "ipj/data/batch_loader.hpp"
#include "ipj/quant/quantized_program.hpp"
#include "ipj/quant/script_model.hpp"
#include "quantized_kernels.hpp"
#include "script_static_plan.hpp"

namespace ipj::quant {
namespace {

namespace jit = torch::jit;
using static_plan::Plan;
using static_plan::Role;
using static_plan::Step;

std::string first_message_line(const c10::Error& error) {
  const std::string text = error.what_without_backtrace();
  return text.substr(0, text.find('\n'));
}

// A frozen copy with BN folded into convolutions (traced aten::_convolution becomes aten::conv2d first).
jit::Module frozen_copy(const jit::Module& module, const std::string& where) {
  try {
    jit::Module copy = module.clone();
    copy.eval();
    jit::Module frozen = jit::freeze_module(copy);
    std::shared_ptr<jit::Graph> graph = frozen.get_method("forward").graph();
    jit::graph_rewrite_helper::replaceConvolutionWithAtenConv(graph);
    jit::removeDropout(graph);
    jit::OptimizeFrozenGraph(graph, /*optimize_numerics=*/true);
    jit::ConstantPropagation(graph);
    jit::EliminateDeadCode(graph);
    return frozen;
  } catch (const c10::Error& error) {
    fail(ErrorCategory::unsupported, "'" + where + "': LibTorch cannot freeze this module for static int8: " +
                                         first_message_line(error) + "; use --mode dynamic");
  }
}

struct Packing {
  std::string engine;
  int next = 0;  // attribute numbering
};

// Per-output-channel qint8 weight as the engine's kernels can use it (quantize_weight's 7-bit rule).
torch::Tensor int8_weight(const torch::Tensor& weight, Packing& packing) {
  const torch::Tensor scales = weight_scales(weight);
  const torch::Tensor zero_points = torch::zeros({scales.size(0)}, torch::kLong);
  const torch::Tensor values =
      torch::quantize_per_channel(weight, scales, zero_points, 0, torch::kQInt8).int_repr();
  return quantize_weight(values, scales, packing.engine);
}

torch::Tensor bias_of(jit::Value* value, std::int64_t outputs) {
  const c10::IValue bias = *jit::toIValue(value);
  return bias.isTensor() ? bias.toTensor().contiguous() : torch::zeros({outputs});
}

Pair pair_of(jit::Value* value) {
  const std::vector<std::int64_t> list = jit::toIValue(value)->toIntVector();
  return list.size() == 1 ? Pair{list[0], list[0]} : Pair{list[0], list[1]};
}

// Registers the packed weights of a conv/linear step on the module; returns the attribute's name.
std::string pack_step(jit::Module& module, const Step& step, Packing& packing) {
  const torch::Tensor weight = jit::toIValue(step.node->input(1))->toTensor().contiguous();
  const torch::Tensor qweight = int8_weight(weight, packing);
  const torch::Tensor bias = bias_of(step.node->input(2), weight.size(0));
  c10::IValue packed;
  if (step.role == Role::conv)
    packed =
        c10::IValue(prepack_conv(qweight, bias, pair_of(step.node->input(3)), pair_of(step.node->input(4)),
                                 pair_of(step.node->input(5)), jit::toIValue(step.node->input(6))->toInt()));
  else
    packed = c10::IValue(prepack_linear(qweight, bias));
  const std::string name = "_ipj_static_packed_" + std::to_string(packing.next++);
  module.register_attribute(name, packed.type(), packed);
  return name;
}

class Rewriter {
 public:
  Rewriter(jit::Module& module, Plan& plan, Packing& packing)
      : module_(module), graph_(module.get_method("forward").graph()), plan_(plan), packing_(packing) {}

  void run() {
    for (const Step& step : plan_.steps)
      if (step.active) rewrite(step);
    dequantize_for_float_readers();
    for (jit::Node* node : dead_)
      node->destroy();
    jit::EliminateDeadCode(graph_);
    jit::EraseShapeInformation(graph_);
  }

 private:
  QuantParams params_of(const jit::Value* value) const {
    return plan_.values.at(value).observer->quant_params();
  }

  jit::Value* quantized(jit::Value* value) {
    if (quantized_values_.count(value)) return value;
    auto& cached = quantize_cache_[value];
    if (cached) return cached;
    jit::Node* definer = value->node();
    jit::WithInsertPoint guard(definer->kind() == c10::prim::Param ? *graph_->nodes().begin()
                                                                   : definer->next());
    const QuantParams params = params_of(value);
    cached = graph_->insert(
        c10::Symbol::fromQualString("aten::quantize_per_tensor"),
        {value, graph_->insertConstant(params.scale), graph_->insertConstant(params.zero_point),
         graph_->insertConstant(static_cast<std::int64_t>(c10::kQUInt8))});
    created_.insert(cached->node());
    return cached;
  }

  void rewrite(const Step& step) {
    jit::Node* last = step.relu ? step.relu : step.node;
    jit::Value* output = nullptr;
    if (step.role == Role::passthrough) {
      quantized_values_.insert(step.node->output());
      return;
    }
    std::vector<jit::NamedValue> inputs;
    for (std::size_t index = 0; index < (step.role == Role::add ? 2u : 1u); ++index)
      inputs.push_back(quantized(step.node->input(index)));
    jit::WithInsertPoint guard(last->next());
    const QuantParams out = params_of(step.output());
    const bool relu = step.relu != nullptr;
    const char* op = step.role == Role::conv     ? (relu ? "quantized::conv2d_relu" : "quantized::conv2d")
                     : step.role == Role::linear ? (relu ? "quantized::linear_relu" : "quantized::linear")
                                                 : (relu ? "quantized::add_relu" : "quantized::add");
    if (step.role != Role::add)
      inputs.push_back(graph_->insertGetAttr(graph_->inputs()[0], pack_step(module_, step, packing_)));
    inputs.push_back(graph_->insertConstant(out.scale));
    inputs.push_back(graph_->insertConstant(out.zero_point));
    output = graph_->insert(c10::Symbol::fromQualString(op), inputs);
    created_.insert(output->node());
    step.output()->replaceAllUsesWith(output);
    if (step.relu) dead_.push_back(step.relu);
    dead_.push_back(step.node);
    quantized_values_.insert(output);
  }

  bool reads_quantized(const jit::Node* node) const {
    return created_.count(node) || static_plan::reads_quantized(plan_, node);
  }

  void dequantize_for_float_readers() {
    for (jit::Value* value : quantized_values_) {
      std::vector<jit::Use> uses = value->uses();
      jit::Value* dequantized = nullptr;
      for (const jit::Use& use : uses) {
        if (reads_quantized(use.user)) continue;
        if (dequantized == nullptr) {
          jit::WithInsertPoint guard(value->node()->next());
          dequantized = graph_->insert(c10::Symbol::fromQualString("aten::dequantize"), {value});
        }
        use.user->replaceInput(use.offset, dequantized);
      }
    }
  }

  jit::Module& module_;
  std::shared_ptr<jit::Graph> graph_;
  Plan& plan_;
  Packing& packing_;
  std::set<jit::Value*> quantized_values_;
  std::set<const jit::Node*> created_;
  std::unordered_map<jit::Value*, jit::Value*> quantize_cache_;
  std::vector<jit::Node*> dead_;
};

std::int64_t constant_bytes(const std::shared_ptr<jit::Graph>& graph) {
  std::int64_t bytes = 0;
  for (const jit::Node* node : graph->nodes()) {
    if (node->kind() != c10::prim::Constant) continue;
    const auto value = jit::toIValue(node->output());
    if (value && value->isTensor()) bytes += value->toTensor().numel() * value->toTensor().element_size();
  }
  return bytes;
}

std::int64_t packed_bytes(const c10::IValue& packed) {
  const auto [weight, bias] = packed.type()->str().find("Conv2d") != std::string::npos
                                  ? packed.toCustomClass<ConvPackedParamsBase<2>>()->unpack()
                                  : packed.toCustomClass<LinearPackedParamsBase>()->unpack();
  const std::int64_t outputs = weight.size(0);
  return weight.numel() + outputs * 4 + (bias ? bias->numel() * 4 : 0);  // int8, scales, float bias
}

std::vector<torch::Tensor> calibration_batches(const data::ImageSet& images, const ImportOptions& import,
                                               const StaticScriptOptions& options) {
  std::vector<torch::Tensor> batches;
  data::for_each_pixel_batch_in_order(images, options.batch_size, options.calib_samples,
                                      [&](const torch::Tensor& pixels, const torch::Tensor&) {
                                        batches.push_back(script_input(import, pixels));
                                      });
  if (batches.empty())
    fail(ErrorCategory::invalid_input,
         "static int8 needs calibration images: the data set has no training samples");
  return batches;
}

enum class Level { regions, isolated, none };

// One attempt at `level`: the rewritten module, run once on the first batch to prove LibTorch takes it.
StaticScript attempt(const jit::Module& module, const std::vector<torch::Tensor>& batches,
                     const StaticScriptOptions& options, Level level, const std::string& where) {
  StaticScript result;
  result.module = std::make_shared<jit::Module>(frozen_copy(module, where));
  if (level == Level::none) return result;
  const std::shared_ptr<jit::Graph> graph = result.module->get_method("forward").graph();
  Plan plan = static_plan::find_steps(graph);
  if (level ==
      Level::isolated)  // no quantized passthrough, add or fused relu: the kernels LibTorch runs most
    for (Step& step : plan.steps) {
      step.enabled = step.role == Role::conv || step.role == Role::linear;
      step.relu = nullptr;
    }
  static_plan::calibrate_plan(plan, graph, result.module->_ivalue(), batches, options);
  result.regions = static_plan::settle_plan(plan, options.every_region);
  Packing packing;
  packing.engine = select_quantized_engine(options.engine);
  Rewriter(*result.module, plan, packing).run();
  for (const Step& step : plan.steps) {
    if (step.role != Role::conv && step.role != Role::linear) continue;
    if (step.active)
      ++result.int8_layers;
    else
      result.float_layers.push_back(step.node->kind().toQualString() + std::string(": ") + step.reason);
  }
  result.engine = packing.engine;
  result.module->forward({batches.front()});
  return result;
}

}  // namespace

std::int64_t static_script_bytes(const jit::Module& module) {
  std::int64_t bytes = 0;
  bool is_static = false;
  for (const jit::NameValue& attribute : module.named_attributes(/*recurse=*/false)) {
    if (attribute.name.rfind("_ipj_static_packed_", 0) != 0) continue;
    is_static = true;
    bytes += packed_bytes(attribute.value);
  }
  return is_static ? bytes + constant_bytes(module.get_method("forward").graph()) : 0;
}

StaticScript quantize_script_static(const jit::Module& module, const ImportOptions& import,
                                    const data::ImageSet& calibration, const StaticScriptOptions& options,
                                    const std::string& where) {
  torch::NoGradGuard no_grad;
  const std::vector<torch::Tensor> batches = calibration_batches(calibration, import, options);
  StaticScript result;
  std::vector<std::string> warnings;
  for (const Level level : {Level::regions, Level::isolated, Level::none}) {
    try {
      result = attempt(module, batches, options, level, where);
      break;
    } catch (const c10::Error& error) {
      warnings.push_back(std::string("LibTorch could not run the ") +
                         (level == Level::regions ? "int8 regions" : "isolated int8 conv/linear calls") +
                         " planned for '" + where + "' (" + first_message_line(error) + "); " +
                         (level == Level::regions ? "each conv/linear is quantized on its own instead"
                                                  : "the model stays float"));
    }
  }
  if (result.engine.empty()) result.engine = select_quantized_engine(options.engine);
  result.fp32_bytes = script_module_bytes(module);
  result.int8_bytes = result.int8_layers > 0 ? static_script_bytes(*result.module)
                                             : constant_bytes(result.module->get_method("forward").graph());
  result.warnings = std::move(warnings);
  return result;
}

}  // namespace ipj::quant
