// The direct TorchScript -> ONNX exporter (see script_onnx.hpp): freezing and clean-up passes, the two trial
// runs that record every top-level value (ifs whose condition is the same in both runs are inlined, then
// recorded again), the value table of ScriptOnnxContext and the walk over the graph's nodes. A node whose
// outputs are the same in both runs and hold no input-dependent tensor is a constant: nothing is emitted.
#include "script_onnx.hpp"

#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/freeze_module.h>
#include <torch/csrc/jit/passes/remove_dropout.h>
#include <torch/csrc/jit/passes/remove_mutation.h>
#include <torch/csrc/jit/runtime/interpreter.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <regex>
#include <unordered_set>

#include "ipj/core/error.hpp"
#include "ipj/export/onnx_export.hpp"
#include "script_onnx_context.hpp"

namespace ipj::exporter {
namespace {

namespace jit = torch::jit;
using Recorded = std::unordered_map<const jit::Value*, c10::IValue>;
constexpr std::int64_t kTrialBatches[2] = {3, 8};  // two batches: what differs between them is dynamic

bool skipped_type(const c10::TypePtr& type) {
  const c10::TypeKind kind = type->kind();
  return kind == c10::TypeKind::ClassType || kind == c10::TypeKind::FunctionType ||
         kind == c10::TypeKind::InterfaceType;
}

bool holds_tensors(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::TensorType) return true;
  for (const c10::TypePtr& contained : type->containedTypes())
    if (holds_tensors(contained)) return true;
  return false;
}

// Top-level values a trial run can return: graph inputs but self, node outputs.
std::vector<jit::Value*> recordable(jit::Graph& graph) {
  std::vector<jit::Value*> values;
  for (std::size_t index = 1; index < graph.inputs().size(); ++index)
    values.push_back(graph.inputs()[index]);
  for (jit::Node* node : graph.nodes())
    for (jit::Value* output : node->outputs())
      if (!skipped_type(output->type())) values.push_back(output);
  return values;
}

std::vector<std::int64_t> sample_input_shape(const std::vector<std::int64_t>& sample, std::int64_t batch) {
  std::vector<std::int64_t> shape{batch};
  shape.insert(shape.end(), sample.begin(), sample.end());
  return shape;
}

// Runs a copy of `graph` that returns every recordable value as one tuple.
Recorded record(const jit::Module& frozen, const std::shared_ptr<jit::Graph>& graph,
                const std::vector<std::int64_t>& sample, std::int64_t batch, const std::string& where) {
  std::shared_ptr<jit::Graph> copy = graph->copy();
  const std::vector<jit::Value*> originals = recordable(*graph);
  const std::vector<jit::Value*> copies = recordable(*copy);
  while (!copy->outputs().empty())
    copy->eraseOutput(0);
  jit::Node* tuple = copy->createTuple(copies);
  copy->appendNode(tuple);
  copy->registerOutput(tuple->output());
  jit::Stack stack{frozen._ivalue(), torch::rand(sample_input_shape(sample, batch))};
  try {
    torch::NoGradGuard no_grad;
    jit::Code code(copy, "ipj_record");
    jit::InterpreterState(code).run(stack);
  } catch (const c10::Error& error) {
    fail(ErrorCategory::invalid_input, "'" + where + "' does not run on --input-shape with batch " +
                                           std::to_string(batch) + ": " + error.what_without_backtrace());
  }
  const auto& elements = stack.back().toTupleRef().elements();
  Recorded recorded;
  for (std::size_t index = 0; index < originals.size(); ++index)
    recorded[originals[index]] = elements[index];
  return recorded;
}

bool same_value(const c10::IValue& a, const c10::IValue& b) {
  if (a.isTensor() || b.isTensor()) {
    if (!a.isTensor() || !b.isTensor()) return false;
    const torch::Tensor& x = a.toTensor();
    const torch::Tensor& y = b.toTensor();
    return x.defined() && y.defined() && x.dim() == 0 && y.dim() == 0 && x.scalar_type() == y.scalar_type() &&
           torch::equal(x, y);
  }
  if (a.isNone() || b.isNone()) return a.isNone() && b.isNone();
  if (a.isInt() && b.isInt()) return a.toInt() == b.toInt();
  if (a.isDouble() && b.isDouble()) return a.toDouble() == b.toDouble();
  if (a.isBool() && b.isBool()) return a.toBool() == b.toBool();
  if (a.isString() && b.isString()) return a.toStringRef() == b.toStringRef();
  if (a.isDevice() && b.isDevice()) return a.toDevice() == b.toDevice();
  if (a.isIntList() && b.isIntList()) return a.toIntVector() == b.toIntVector();
  if (a.isDoubleList() && b.isDoubleList()) return a.toDoubleVector() == b.toDoubleVector();
  if (a.isBoolList() && b.isBoolList()) return a.toBoolList().vec() == b.toBoolList().vec();
  if ((a.isTuple() && b.isTuple()) || (a.isList() && b.isList())) {
    const std::vector<c10::IValue> x = a.isTuple() ? a.toTupleRef().elements().vec() : a.toListRef().vec();
    const std::vector<c10::IValue> y = b.isTuple() ? b.toTupleRef().elements().vec() : b.toListRef().vec();
    if (x.size() != y.size()) return false;
    for (std::size_t index = 0; index < x.size(); ++index)
      if (!same_value(x[index], y[index])) return false;
    return true;
  }
  return false;
}

// Values from outside a block that its nodes (and nested blocks) read.
void add_block_reads(const jit::Block* block, std::vector<const jit::Value*>& pending) {
  for (const jit::Node* node : block->nodes()) {
    for (const jit::Value* input : node->inputs())
      pending.push_back(input);
    for (const jit::Block* nested : node->blocks())
      add_block_reads(nested, pending);
  }
  for (const jit::Value* output : block->outputs())
    pending.push_back(output);
}

// The top-level nodes the graph's output depends on: the rest (checks whose raise was removed, values only
// a warning reads) is not exported.
std::unordered_set<const jit::Node*> needed_nodes(const jit::Graph& graph) {
  std::unordered_set<const jit::Node*> needed;
  std::vector<const jit::Value*> pending(graph.outputs().begin(), graph.outputs().end());
  while (!pending.empty()) {
    const jit::Node* node = pending.back()->node();
    pending.pop_back();
    if (node->owningBlock() != graph.block() || node->kind() == c10::prim::Param) continue;
    if (!needed.insert(node).second) continue;
    for (const jit::Value* input : node->inputs())
      pending.push_back(input);
    for (const jit::Block* block : node->blocks())
      add_block_reads(block, pending);
  }
  return needed;
}

// Whether `node` writes into its first input (an in-place op: aten::relu_, clamp_, add_, ...).
bool writes_first_input(const jit::Node* node) {
  const c10::FunctionSchema* schema = node->maybeSchema();
  if (schema == nullptr || schema->arguments().empty()) return false;
  const c10::AliasInfo* alias = schema->arguments()[0].alias_info();
  return alias != nullptr && alias->isWrite();
}

// Whether `node`'s output is a view of its first input (view, reshape, flatten, contiguous, detach, ...).
bool views_first_input(const jit::Node* node) {
  const c10::FunctionSchema* schema = node->maybeSchema();
  if (schema == nullptr || schema->arguments().empty() || schema->returns().size() != 1) return false;
  const c10::AliasInfo* input = schema->arguments()[0].alias_info();
  const c10::AliasInfo* output = schema->returns()[0].alias_info();
  return input != nullptr && output != nullptr && !output->isWrite() &&
         input->beforeSets() == output->beforeSets();
}

// An in-place op LibTorch's RemoveTensorMutation left in the graph (the tensor has aliases) is exported as a
// new value, and the export skips ops whose output nothing reads: right only where nothing else reads the
// tensor or what it is a view of. Otherwise the file would answer without the change (a hostile pass: `f =
// a.view(B, -1); a.relu_(); return fc(f)` wrote a file 0.36 off, `--verify` not asked for): refused.
void refuse_aliased_mutations(const jit::Graph& graph, const ScriptOnnxContext& context) {
  for (const jit::Node* node : graph.nodes()) {
    if (!writes_first_input(node)) continue;
    const jit::Node* reader = node;
    for (const jit::Value* value = node->input(0);; value = value->node()->input(0)) {
      for (const jit::Use& use : value->uses())
        if (use.user != reader)
          context.refuse(node,
                         "changes a tensor in place that another value reads or is a view of (e.g. `f = "
                         "a.view(...); a.relu_()`); ONNX has no in-place operations: write it out of "
                         "place (`a = a.relu()`)");
      if (!views_first_input(value->node())) break;
      reader = value->node();
    }
  }
}

struct Prepared {
  jit::Module frozen;
  std::shared_ptr<jit::Graph> graph;
  Recorded runs[2];
};

bool block_raises(const jit::Block* block) {
  for (const jit::Node* node : block->nodes())
    if (node->kind() == c10::prim::RaiseException) return true;
  return false;
}

bool block_empty(const jit::Block* block) {
  return block->nodes().begin() == block->nodes().end();
}

// `if <check>: raise ...` without outputs (input checks such as GroupNorm's batch-size check): the export
// checks its input shape itself, so the guard goes, and DCE takes what only fed it.
void remove_input_guards(const std::shared_ptr<jit::Graph>& graph) {
  std::vector<jit::Node*> guards;
  for (jit::Node* node : graph->nodes()) {
    if (node->kind() != c10::prim::If || !node->outputs().empty()) continue;
    const auto blocks = node->blocks();
    if ((block_empty(blocks[0]) && block_raises(blocks[1])) ||
        (block_empty(blocks[1]) && block_raises(blocks[0])))
      guards.push_back(node);
  }
  for (jit::Node* guard : guards)
    guard->destroy();
  jit::EliminateDeadCode(graph);
}

// Ifs whose condition came out the same in both runs get it as a constant; ConstantPropagation inlines them.
bool inline_static_ifs(Prepared& prepared) {
  bool changed = false;
  for (jit::Node* node : prepared.graph->nodes()) {
    if (node->kind() != c10::prim::If) continue;
    const jit::Value* condition = node->input(0);
    if (condition->node()->kind() == c10::prim::Constant) continue;
    const auto first = prepared.runs[0].find(condition);
    const auto second = prepared.runs[1].find(condition);
    if (first == prepared.runs[0].end() || second == prepared.runs[1].end()) continue;
    if (!same_value(first->second, second->second)) continue;
    jit::WithInsertPoint guard(node);
    node->replaceInput(0, prepared.graph->insertConstant(first->second));
    changed = true;
  }
  if (!changed) return false;
  jit::ConstantPropagation(prepared.graph);
  remove_input_guards(prepared.graph);
  return true;
}

Prepared prepare(const std::string& path, const std::vector<std::int64_t>& sample) {
  jit::Module module;
  try {
    module = jit::load(path);
  } catch (const c10::Error& error) {
    fail(ErrorCategory::invalid_input,
         "'" + path + "' is not a TorchScript file: " + error.what_without_backtrace());
  }
  module.eval();
  Prepared prepared;
  try {
    prepared.frozen = jit::freeze_module(module.clone());
  } catch (const c10::Error& error) {
    fail(ErrorCategory::unsupported,
         "'" + path + "': LibTorch cannot freeze this module: " + error.what_without_backtrace());
  }
  prepared.graph = prepared.frozen.get_method("forward").graph();
  jit::removeDropout(prepared.graph);
  jit::RemoveTensorMutation(prepared.graph);
  jit::ConstantPropagation(prepared.graph);
  remove_input_guards(prepared.graph);
  for (int round = 0; round < 32; ++round) {
    for (int run = 0; run < 2; ++run)
      prepared.runs[run] = record(prepared.frozen, prepared.graph, sample, kTrialBatches[run], path);
    if (!inline_static_ifs(prepared)) break;
  }
  return prepared;
}

// "__torch__.torch.nn.modules.conv.___torch_mangle_3.Conv2d" -> "torch.nn.modules.conv.Conv2d"
std::string readable_class_name(const std::string& qualified) {
  std::string name = std::regex_replace(qualified, std::regex("___torch_mangle_[0-9]+\\."), "");
  const std::string prefix = "__torch__.";
  return name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
}

}  // namespace

// ---- ScriptOnnxContext ----

const Sym& ScriptOnnxContext::sym(const jit::Value* value) const {
  const auto found = syms_.find(value);
  if (found == syms_.end()) refuse(value->node(), "produces a value the exporter did not convert");
  return found->second;
}

bool ScriptOnnxContext::is_constant(const jit::Value* value) const {
  const auto found = syms_.find(value);
  return found != syms_.end() && found->second.kind == Sym::Kind::constant;
}

c10::IValue ScriptOnnxContext::constant(const jit::Value* value) const {
  const Sym& found = sym(value);
  if (found.kind != Sym::Kind::constant)
    refuse(value->node(), "gives an input that changes with the input batch, where ipj needs a constant");
  return found.value;
}

std::int64_t ScriptOnnxContext::integer(const jit::Value* value) const {
  const c10::IValue constant_value = constant(value);
  return constant_value.isTensor() ? constant_value.toTensor().item<std::int64_t>() : constant_value.toInt();
}

double ScriptOnnxContext::number(const jit::Value* value) const {
  const c10::IValue constant_value = constant(value);
  if (constant_value.isTensor()) return constant_value.toTensor().item<double>();
  return constant_value.isInt() ? static_cast<double>(constant_value.toInt()) : constant_value.toDouble();
}

std::vector<std::int64_t> ScriptOnnxContext::ints(const jit::Value* value) const {
  const c10::IValue constant_value = constant(value);
  if (constant_value.isInt()) return {constant_value.toInt()};
  return constant_value.toIntVector();
}

std::string ScriptOnnxContext::tensor(const jit::Value* value) {
  const Sym& found = sym(value);
  if (found.kind == Sym::Kind::tensor) return found.name;
  if (found.kind == Sym::Kind::list) refuse(value->node(), "gives a list where ipj needs one tensor");
  if (const auto done = materialized_.find(value); done != materialized_.end()) return done->second;
  const c10::IValue& constant_value = found.value;
  std::string name;
  if (constant_value.isTensor())
    name = initializer(constant_value.toTensor().to(torch::kFloat));
  else if (constant_value.isInt() || constant_value.isDouble() || constant_value.isBool())
    name = scalar(constant_value.isInt()    ? static_cast<double>(constant_value.toInt())
                  : constant_value.isBool() ? (constant_value.toBool() ? 1.0 : 0.0)
                                            : constant_value.toDouble());
  else
    refuse(value->node(), "gives a " + constant_value.tagKind() + " where ipj needs a tensor");
  return materialized_[value] = name;
}

std::string ScriptOnnxContext::int64_tensor(const jit::Value* value) {
  return int64_tensor(sym(value));
}

std::string ScriptOnnxContext::int64_tensor(const Sym& found) {
  if (found.kind == Sym::Kind::tensor) return found.name;
  if (found.kind == Sym::Kind::constant) {
    const c10::IValue& value = found.value;
    if (value.isTensor()) return initializer(value.toTensor().to(torch::kLong));
    if (value.isInt()) return initializer(torch::tensor(value.toInt(), torch::kLong));
    return int64s(value.toIntVector());
  }
  std::vector<std::string> parts;
  for (const Sym& item : found.items) {
    if (item.kind == Sym::Kind::constant)
      parts.push_back(
          int64s({item.value.isTensor() ? item.value.toTensor().item<std::int64_t>() : item.value.toInt()}));
    else
      parts.push_back(op("Unsqueeze", {int64_tensor(item), int64s({0})}));
  }
  onnx::NodeProto& concat = node("Concat", parts);
  set_attribute(concat, "axis", std::int64_t{0});
  return concat.output(0);
}

std::vector<std::int64_t> ScriptOnnxContext::shape(const jit::Value* value) const {
  const auto found = shapes.find(value);
  if (found == shapes.end()) refuse(value->node(), "gives a value whose shape was not recorded");
  return found->second;
}

std::int64_t ScriptOnnxContext::dim(const jit::Value* value, std::int64_t dim) const {
  return dim < 0 ? dim + rank(value) : dim;
}

bool ScriptOnnxContext::static_dim(const jit::Value* value, std::int64_t dim) const {
  const auto first = shapes.find(value);
  const auto second = second_shapes.find(value);
  if (first == shapes.end() || second == second_shapes.end()) return false;
  const auto index = static_cast<std::size_t>(dim);
  return index < first->second.size() && index < second->second.size() &&
         first->second[index] == second->second[index];
}

std::string ScriptOnnxContext::scalar(double value) {
  return initializer(torch::tensor(static_cast<float>(value)));
}

std::string ScriptOnnxContext::initializer(const torch::Tensor& tensor) {
  return writer_.initializer(fresh("const"), tensor);
}

std::string ScriptOnnxContext::int64s(const std::vector<std::int64_t>& values) {
  return initializer(torch::tensor(values, torch::kLong));
}

onnx::NodeProto& ScriptOnnxContext::node(const std::string& op_type, const std::vector<std::string>& inputs,
                                         int outputs) {
  std::vector<std::string> names;
  for (int index = 0; index < outputs; ++index)
    names.push_back(fresh(op_type));
  return writer_.node(op_type, inputs, names);
}

std::string ScriptOnnxContext::fresh(const std::string& hint) {
  return hint + "_" + std::to_string(counter_++);
}

std::string ScriptOnnxContext::place(const jit::Node* node) const {
  std::string path, class_name;
  if (const auto stack = node->callstack()) {
    for (const auto& entry : (*stack)->vec()) {
      const auto& instance = std::get<2>(entry);
      if (!instance) continue;
      if (instance->class_type())
        class_name = readable_class_name(instance->class_type()->name()->qualifiedName());
      const std::string name = instance->instance_name();
      if (name != "SELF" && !name.empty()) path += (path.empty() ? "" : ".") + name;
    }
  }
  std::string text = path.empty() ? "the model's own forward" : "module '" + path + "'";
  if (!class_name.empty() && !path.empty()) text += " (" + class_name + ")";
  if (const auto location = node->sourceRange().file_line_col())
    text += ", " + std::get<0>(*location) + ":" + std::to_string(std::get<1>(*location));
  return text;
}

void ScriptOnnxContext::refuse(const jit::Node* node, const std::string& why) const {
  fail(ErrorCategory::unsupported,
       "'" + where_ + "': " + node->kind().toQualString() + " in " + place(node) + " " + why +
           "; ipj's TorchScript -> ONNX export covers the operators listed in docs/EXPORT.md (rewrite that "
           "part of the model with covered operators, or export it with torch.onnx)");
}

const ScriptOpTable& script_op_converters() {
  static const ScriptOpTable table = [] {
    ScriptOpTable made;
    add_tensor_op_converters(made);
    add_layer_op_converters(made);
    add_quantized_op_converters(made);
    return made;
  }();
  return table;
}

namespace {

class ScriptWalker {
 public:
  ScriptWalker(Prepared& prepared, ScriptOnnxContext& context) : prepared_(prepared), context_(context) {
    for (int run = 0; run < 2; ++run)
      for (const auto& [value, recorded] : prepared.runs[run]) {
        if (!recorded.isTensor() || !recorded.toTensor().defined()) {
          if (run == 0 && (recorded.isInt() || recorded.isIntList())) context.integral_values.insert(value);
          continue;
        }
        const torch::Tensor& tensor = recorded.toTensor();
        (run == 0 ? context.shapes : context.second_shapes)[value] = tensor.sizes().vec();
        if (run == 0 && !tensor.is_floating_point() && !tensor.is_quantized())  // quint8: float in ONNX
          context.integral_values.insert(value);
        if (run == 0 && tensor.is_quantized() && tensor.qscheme() == torch::kPerTensorAffine)
          context.quantized_params[value] = {tensor.q_scale(), tensor.q_zero_point()};
      }
  }

  Json walk() {
    Json operators = Json::object();
    const std::unordered_set<const jit::Node*> needed = needed_nodes(*prepared_.graph);
    refuse_aliased_mutations(*prepared_.graph, context_);
    for (const jit::Node* node : prepared_.graph->nodes()) {
      if (needed.count(node) == 0) continue;
      const std::string kind = node->kind().toQualString();
      if (node->kind().is_aten() || kind.rfind("quantized::", 0) == 0)
        operators[kind] = operators.value(kind, 0) + 1;
      if (node->kind() == c10::prim::Constant) {
        const c10::optional<c10::IValue> value = jit::toIValue(node->output());
        if (value)  // packed int8 weights (custom classes) too
          context_.bind(node->output(), Sym::constant(*value));
      } else if (!node->outputs().empty()) {
        try {
          convert(node, kind);
        } catch (const c10::Error& error) {  // an argument of a form the converter does not take
          context_.refuse(node, std::string("with arguments the exporter cannot convert (") +
                                    error.what_without_backtrace() + ")");
        }
      }
    }
    return operators;
  }

 private:
  Prepared& prepared_;
  ScriptOnnxContext& context_;

  bool is_static(const jit::Node* node) const {
    bool inputs_static = true;
    for (const jit::Value* input : node->inputs())
      inputs_static = inputs_static && (skipped_type(input->type()) || context_.is_constant(input));
    for (const jit::Value* output : node->outputs()) {
      const auto first = prepared_.runs[0].find(output);
      const auto second = prepared_.runs[1].find(output);
      if (first == prepared_.runs[0].end() || second == prepared_.runs[1].end()) return false;
      if (same_value(first->second, second->second)) continue;
      if (!holds_tensors(output->type()) || !inputs_static) return false;
    }
    return true;
  }

  void convert(const jit::Node* node, const std::string& kind) {
    if (is_static(node)) {
      for (const jit::Value* output : node->outputs())
        context_.bind(output, Sym::constant(prepared_.runs[0].at(output)));
      return;
    }
    const ScriptOpTable& table = script_op_converters();
    const auto found = table.find(kind);
    if (found == table.end()) {
      if (node->kind() == c10::prim::If || node->kind() == c10::prim::Loop)
        context_.refuse(node, "is control flow that depends on the input values");
      context_.refuse(node, "has no ONNX conversion here");
    }
    found->second(context_, node);
    requantize_rounding_output(context_, node);
  }
};

// pixels [N, ...] -> the module's input: (pixels - mean) / std per channel for [C, H, W] inputs, as ipj's
// inference of TorchScript files does.
std::string normalized_input(OnnxGraphWriter& writer, const quant::ImportOptions& import) {
  std::string x = kInputName;
  if (import.mean.empty() || import.input_shape.size() != 3) return x;
  auto per_channel = [&](const std::string& name, const std::vector<float>& values) {
    return writer.initializer(name, torch::tensor(values).reshape({-1, 1, 1}).contiguous());
  };
  x = writer.node("Sub", {x, per_channel("input.mean", import.mean)}, {"input.centered"}).output(0);
  return writer.node("Div", {x, per_channel("input.std", import.std)}, {"input.normalized"}).output(0);
}

}  // namespace

ScriptOnnx script_to_onnx(const std::string& path, const quant::ImportOptions& import, int opset) {
  if (opset < kMinimumOpset || opset > kMaximumOpset)
    fail(ErrorCategory::usage, "--opset " + std::to_string(opset) + " is outside what ipj writes (" +
                                   std::to_string(kMinimumOpset) + " to " + std::to_string(kMaximumOpset) +
                                   ")");
  if (import.input_shape.empty())
    fail(ErrorCategory::usage, "'" + path + "' is TorchScript: --input-shape is required (e.g. 1,28,28)");
  Prepared prepared = prepare(path, import.input_shape);
  const c10::TypePtr returned = prepared.graph->outputs().at(0)->type();
  if (returned->kind() != c10::TypeKind::TensorType)
    fail(ErrorCategory::invalid_input,
         "'" + path + "' returns " + returned->annotation_str() +
             ", not one tensor; ipj exports models that return one tensor of logits ([N, classes]): return "
             "that tensor from forward (e.g. the first element of the tuple)");
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("ipj");
  model.set_producer_version("0.1.0");
  model.set_model_version(1);
  model.set_doc_string("ipj export (direct from TorchScript) of '" + path +
                       "': raw pixels in [0, 1] -> logits");
  onnx::OperatorSetIdProto* opset_import = model.add_opset_import();
  opset_import->set_domain("");
  opset_import->set_version(opset);
  onnx::GraphProto* proto = model.mutable_graph();
  proto->set_name("ipj_torchscript");
  OnnxGraphWriter writer(*proto);
  writer.add_input(kInputName, import.input_shape, "batch");
  ScriptOnnxContext context(*proto, path);
  context.opset = opset;
  context.bind(prepared.graph->inputs().at(1), Sym::tensor(normalized_input(writer, import)));
  ScriptWalker walker(prepared, context);
  ScriptOnnx result;
  result.operators = walker.walk();
  const jit::Value* output = prepared.graph->outputs().at(0);
  const std::vector<std::int64_t> output_shape = context.shape(output);
  if (output_shape.size() != 2)
    fail(ErrorCategory::unsupported, "'" + path + "' returns a " + std::to_string(output_shape.size()) +
                                         "-D tensor; ipj exports classifiers ([N, classes])");
  writer.node("Identity", {context.tensor(output)}, {kOutputName});
  result.output_shape.assign(output_shape.begin() + 1, output_shape.end());
  writer.add_output(kOutputName, result.output_shape, "batch");
  result.dynamic_int8 = context.dynamic_int8;
  result.static_int8 = context.static_int8;
  if (!model.SerializeToString(&result.bytes))
    fail(ErrorCategory::internal, "ONNX export: protobuf serialization failed (model over 2 GiB?)");
  check_onnx_model(result.bytes, path);
  return result;
}

}  // namespace ipj::exporter
