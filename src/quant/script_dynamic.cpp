// Dynamic int8 of a TorchScript module by rewriting its nn.Linear submodules in place (see script_model.hpp):
// each gets a prepacked int8 weight attribute and a forward that calls quantized::linear_dynamic. Limits:
// only modules of class torch.nn.Linear (as quantize_dynamic's default mapping; not LSTM/GRU, not
// NonDynamicallyQuantizableLinear, not F.linear on other parameters), per-tensor weights only.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <limits>
#include <regex>
#include <set>

#include "ipj/core/error.hpp"
#include "ipj/quant/quantized_program.hpp"
#include "ipj/quant/script_model.hpp"
#include "ipj/quant/script_static.hpp"
#include "quantized_kernels.hpp"

namespace ipj::quant {
namespace {

namespace jit = torch::jit;
constexpr const char* kPackedName = "_ipj_packed_params";

bool is_linear_class(const c10::ClassTypePtr& type) {
  static const std::regex pattern(R"(__torch__\.torch\.nn\.modules\.linear\.(___torch_mangle_\d+\.)*Linear)");
  return type->name() && std::regex_match(type->name()->qualifiedName(), pattern);
}

// The one top-level aten::linear(x, self.weight, self.bias) of a Linear's forward, else nullptr.
jit::Node* find_linear_call(const std::shared_ptr<jit::Graph>& graph) {
  jit::Value* self = graph->inputs()[0];
  jit::Node* found = nullptr;
  for (jit::Node* node : graph->nodes()) {
    if (node->kind() != c10::Symbol::fromQualString("aten::linear")) continue;
    const jit::Node* weight = node->input(1)->node();
    if (weight->kind() != c10::prim::GetAttr || weight->s(c10::attr::name) != "weight" ||
        weight->input(0) != self || found != nullptr)
      return nullptr;
    found = node;
  }
  return found;
}

// PyTorch's default dynamic weight observer: MinMaxObserver(qint8, per_tensor_symmetric) in float32.
torch::Tensor quantize_like_pytorch(const torch::Tensor& weight) {
  const torch::Tensor w = weight.detach().to(torch::kFloat).contiguous();
  const torch::Tensor min_neg = torch::clamp_max(w.min(), 0.0);
  const torch::Tensor max_pos = torch::clamp_min(w.max(), 0.0);
  const torch::Tensor scale =
      torch::clamp_min(torch::max(-min_neg, max_pos) / 127.5, std::numeric_limits<float>::epsilon());
  return torch::quantize_per_tensor(w, scale.item<float>(), 0, torch::kQInt8);
}

LinearPacked prepack(const torch::Tensor& qweight, const c10::optional<torch::Tensor>& bias) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("quantized::linear_prepack", "")
                       .typed<LinearPacked(at::Tensor, c10::optional<at::Tensor>)>();
  return op.call(qweight, bias);
}

// Rewrites forward to read the packed weight (once per class: scripted Linears share one).
void rewrite_forward(jit::Module& linear) {
  const std::shared_ptr<jit::Graph> graph = linear.get_method("forward").graph();
  jit::Node* call = find_linear_call(graph);
  if (call == nullptr) return;  // checked by the caller
  jit::WithInsertPoint guard(call);
  jit::Value* packed = graph->insertGetAttr(graph->inputs()[0], kPackedName);
  jit::Value* reduce_range = graph->insertConstant(true);  // as nn.quantized.dynamic.Linear calls it
  jit::Value* output = graph->insert(c10::Symbol::fromQualString("quantized::linear_dynamic"),
                                     {call->input(0), packed, reduce_range});
  call->output()->replaceAllUsesWith(output);
  call->destroy();
  jit::EliminateDeadCode(graph);
}

// Classes whose `weight` attribute some graph of the module still reads (e.g. MultiheadAttention reading
// its out_proj.weight, TransformerEncoderLayer's fast path reading linear1.weight).
std::set<std::string> classes_with_weight_read(const jit::Module& root) {
  std::set<std::string> classes;
  for (const jit::Module& module : root.modules()) {
    for (const jit::Method& method : module.get_methods()) {
      std::vector<jit::Block*> blocks{method.graph()->block()};
      while (!blocks.empty()) {
        jit::Block* block = blocks.back();
        blocks.pop_back();
        for (jit::Node* node : block->nodes()) {
          for (jit::Block* inner : node->blocks())
            blocks.push_back(inner);
          if (node->kind() != c10::prim::GetAttr || node->s(c10::attr::name) != "weight") continue;
          const auto type = node->input(0)->type()->cast<c10::ClassType>();
          if (type && type->name()) classes.insert(type->name()->qualifiedName());
        }
      }
    }
  }
  return classes;
}

}  // namespace

std::int64_t script_model_bytes(const jit::Module& module) {
  std::int64_t bytes = script_module_bytes(module);
  for (const jit::Module& linear : module.modules()) {
    if (!linear.hasattr(kPackedName)) continue;
    const auto packed = linear.attr(kPackedName).toCustomClass<LinearPackedParamsBase>();
    bytes += std::get<0>(packed->unpack()).numel() + 8;  // int8 weights + scale and zero point
  }
  return bytes + static_script_bytes(module);
}

DynamicScript quantize_script_dynamic(const jit::Module& module, const std::string& engine,
                                      const std::string& where) {
  torch::NoGradGuard no_grad;
  select_quantized_engine(engine);  // the packing below is for this engine; files repack on load
  DynamicScript result;
  result.fp32_bytes = script_module_bytes(module);
  // clone, not deepcopy: the copy gets its own classes, so rewriting them leaves the source module intact
  result.module = std::make_shared<jit::Module>(module.clone());
  jit::Module& copy = *result.module;
  std::set<std::string> rewritten;  // class names whose forward is done
  for (const jit::NameModule& entry : copy.named_modules()) {
    jit::Module linear = entry.value;
    const c10::ClassTypePtr type = linear.type();
    if (!is_linear_class(type)) continue;
    const std::string label = entry.name.empty() ? "(root)" : entry.name;
    const c10::IValue weight = linear.attr("weight");
    if (!weight.isTensor() || weight.toTensor().dim() != 2 || !weight.toTensor().is_floating_point() ||
        (!rewritten.count(type->name()->qualifiedName()) &&
         find_linear_call(linear.get_method("forward").graph()) == nullptr)) {
      result.float_layers.push_back(label + ": its forward is not F.linear(x, self.weight, self.bias)");
      continue;
    }
    const c10::IValue bias_value = linear.attr("bias");
    const torch::Tensor qweight = quantize_like_pytorch(weight.toTensor());
    c10::optional<torch::Tensor> bias;
    if (bias_value.isTensor()) bias = bias_value.toTensor().detach().to(torch::kFloat).contiguous();
    const c10::IValue packed(prepack(qweight, bias));
    linear.register_attribute(kPackedName, packed.type(), packed);
    if (rewritten.insert(type->name()->qualifiedName()).second) rewrite_forward(linear);
    ++result.quantized_layers;
  }
  if (result.quantized_layers == 0)
    fail(ErrorCategory::unsupported,
         "'" + where + "' has no torch.nn.Linear layer to quantize dynamically" +
             (result.float_layers.empty() ? std::string() : " (" + result.float_layers.front() + ")") +
             "; dynamic int8 covers nn.Linear, as torch.ao.quantization.quantize_dynamic does: use --mode "
             "static for convolutional models the graph importer supports");
  // Float weights nothing else reads are dropped (the int8 copy is packed), as quantize_dynamic does.
  const std::set<std::string> still_read = classes_with_weight_read(copy);
  for (const jit::Module& linear : copy.modules()) {
    const c10::ClassTypePtr type = linear.type();
    if (!rewritten.count(type->name()->qualifiedName()) || still_read.count(type->name()->qualifiedName()))
      continue;
    linear._ivalue()->setAttr("weight", torch::empty({0}));
  }
  result.int8_bytes = script_model_bytes(copy);
  return result;
}

std::int64_t script_module_bytes(const jit::Module& module) {
  std::int64_t bytes = 0;
  for (const torch::Tensor& parameter : module.parameters())
    bytes += parameter.numel() * parameter.element_size();
  for (const torch::Tensor& buffer : module.buffers())
    if (buffer.defined()) bytes += buffer.numel() * buffer.element_size();
  return bytes;
}

}  // namespace ipj::quant
