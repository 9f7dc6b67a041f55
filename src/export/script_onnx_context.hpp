// Private to script_onnx*.cpp: what an operator converter sees. Every TorchScript value is a Sym: an ONNX
// tensor name (float32, or an int64 scalar for a batch-dependent integer), a constant known at export time,
// or a list/tuple of Syms. Shapes are those of the first trial run (batch included, dim 0).
#pragma once

#include <torch/csrc/jit/ir/ir.h>
#include <torch/script.h>

#include <functional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "onnx_builder.hpp"

namespace ipj::exporter {

struct Sym {
  enum class Kind { tensor, constant, list };
  Kind kind = Kind::constant;
  std::string name;        // tensor
  c10::IValue value;       // constant
  std::vector<Sym> items;  // list / tuple
  static Sym tensor(std::string onnx_name) {
    Sym sym;
    sym.kind = Kind::tensor;
    sym.name = std::move(onnx_name);
    return sym;
  }
  static Sym constant(c10::IValue constant_value) {
    Sym sym;
    sym.value = std::move(constant_value);
    return sym;
  }
  static Sym list(std::vector<Sym> elements) {
    Sym sym;
    sym.kind = Kind::list;
    sym.items = std::move(elements);
    return sym;
  }
};

class ScriptOnnxContext {
 public:
  ScriptOnnxContext(onnx::GraphProto& graph, std::string where) : writer_(graph), where_(std::move(where)) {}

  void bind(const torch::jit::Value* value, Sym sym) { syms_[value] = std::move(sym); }
  const Sym& sym(const torch::jit::Value* value) const;
  bool is_constant(const torch::jit::Value* value) const;      // a constant or a list of constants
  c10::IValue constant(const torch::jit::Value* value) const;  // refuses dynamic values
  std::int64_t integer(const torch::jit::Value* value) const;
  double number(const torch::jit::Value* value) const;
  std::vector<std::int64_t> ints(const torch::jit::Value* value) const;  // a static int list (or one int)

  // The ONNX float32 tensor for `value` (constants become initializers, once).
  std::string tensor(const torch::jit::Value* value);
  // An int64 tensor for an int value (0-d) or an int list (1-d), dynamic elements Concat'ed.
  std::string int64_tensor(const torch::jit::Value* value);
  std::string int64_tensor(const Sym& sym);
  // Recorded shape (first trial run) of a tensor value, and its rank.
  std::vector<std::int64_t> shape(const torch::jit::Value* value) const;
  std::int64_t rank(const torch::jit::Value* value) const {
    return static_cast<std::int64_t>(shape(value).size());
  }
  std::int64_t dim(const torch::jit::Value* value, std::int64_t dim) const;  // normalised (negatives)

  // Initializers: a float scalar (0-d), a float tensor, an int64 vector.
  std::string scalar(double value);
  std::string initializer(const torch::Tensor& tensor);
  std::string int64s(const std::vector<std::int64_t>& values);
  // One ONNX node with fresh output names; returns it (outputs: node.output(i)).
  onnx::NodeProto& node(const std::string& op_type, const std::vector<std::string>& inputs, int outputs = 1);
  std::string op(const std::string& op_type, const std::vector<std::string>& inputs) {
    return node(op_type, inputs).output(0);
  }
  std::string fresh(const std::string& hint);

  // ipj::Error(unsupported) naming the node's operator and where it sits in the module.
  [[noreturn]] void refuse(const torch::jit::Node* node, const std::string& why) const;
  std::string place(const torch::jit::Node* node) const;

  bool integral(const torch::jit::Value* value) const { return integral_values.count(value) > 0; }
  // Whether dim `dim` of a tensor value has the same size in both trial runs (not the batch).
  bool static_dim(const torch::jit::Value* value, std::int64_t dim) const;

  std::unordered_map<const torch::jit::Value*, std::vector<std::int64_t>> shapes, second_shapes;
  std::unordered_set<const torch::jit::Value*> integral_values;  // ints and integer tensors
  int opset = 17;
  bool dynamic_int8 = false;
  bool static_int8 = false;
  // Scale and zero point of values that were per-tensor quantized tensors in the trial run.
  std::unordered_map<const torch::jit::Value*, std::pair<double, std::int64_t>>
      quantized_params;  // quantize_per_tensor / quantized::conv2d, linear, add (QDQ)

 private:
  OnnxGraphWriter writer_;
  std::string where_;
  std::unordered_map<const torch::jit::Value*, Sym> syms_;
  std::unordered_map<const torch::jit::Value*, std::string> materialized_;
  int counter_ = 0;
};

// Converts one node: binds every output. Looked up by the node's kind ("aten::conv2d").
using ScriptOpConverter = std::function<void(ScriptOnnxContext&, const torch::jit::Node*)>;
using ScriptOpTable = std::unordered_map<std::string, ScriptOpConverter>;
const ScriptOpTable& script_op_converters();
void add_tensor_op_converters(ScriptOpTable& table);  // script_onnx_ops.cpp: elementwise, shapes, lists
void add_layer_op_converters(ScriptOpTable& table);   // script_onnx_layers.cpp: conv, norms, pools, attention
void add_quantized_op_converters(ScriptOpTable& table);  // script_onnx_quantized.cpp: static int8 as QDQ
// GELU of ONNX tensor `x`: exact (erf) or PyTorch's tanh approximation (script_onnx_ops.cpp).
std::string gelu_of(ScriptOnnxContext& context, const std::string& x, bool tanh_approximation);
// After a float converter ran an averaging op (pools, mean) on a quantized tensor: its output goes back onto
// the quantized grid, as LibTorch's quantized kernels round it (script_onnx_quantized.cpp).
void requantize_rounding_output(ScriptOnnxContext& context, const torch::jit::Node* node);

}  // namespace ipj::exporter
