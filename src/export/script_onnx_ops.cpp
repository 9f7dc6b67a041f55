// Direct TorchScript -> ONNX: elementwise operators, activations, shape and list operators (see
// script_onnx_context.hpp). Integer arithmetic on the batch size becomes int64 ONNX arithmetic; lists and
// tuples stay symbolic. Limits: floor division of batch-dependent integers assumes non-negative values.
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <optional>

#include "ipj/core/error.hpp"
#include "script_onnx_context.hpp"

namespace ipj::exporter {
namespace {

namespace jit = torch::jit;
using Context = ScriptOnnxContext;
using Node = jit::Node;

bool is_none(const Context& context, const jit::Value* value) {
  return context.is_constant(value) && context.constant(value).isNone();
}

void bind_tensor(Context& context, const Node* node, const std::string& name) {
  context.bind(node->output(), Sym::tensor(name));
}

ScriptOpConverter unary(const std::string& op_type) {
  return [op_type](Context& context, const Node* node) {
    bind_tensor(context, node, context.op(op_type, {context.tensor(node->input(0))}));
  };
}

ScriptOpConverter pass_through() {
  return
      [](Context& context, const Node* node) { context.bind(node->output(), context.sym(node->input(0))); };
}

// add/sub/mul/div on tensors (float32) or on batch-dependent integers (int64); `alpha` scales `other`.
ScriptOpConverter binary(const std::string& op_type, bool reversed = false) {
  return [op_type, reversed](Context& context, const Node* node) {
    if (node->output()->type()->kind() == c10::TypeKind::ListType) context.refuse(node, "on lists");
    const bool integral = context.integral(node->output());
    const jit::Value* first = node->input(0);
    const jit::Value* second = node->input(1);
    if (op_type == "Div" && node->inputs().size() == 3 && !is_none(context, node->input(2))) {
      const std::string mode = context.constant(node->input(2)).toStringRef();
      if (mode != "floor" || !integral) context.refuse(node, "with rounding_mode='" + mode + "'");
    }
    std::string a = integral ? context.int64_tensor(first) : context.tensor(first);
    std::string b = integral ? context.int64_tensor(second) : context.tensor(second);
    const bool has_alpha = (op_type == "Add" || op_type == "Sub") && node->inputs().size() == 3;
    if (has_alpha && context.number(node->input(2)) != 1.0) {
      if (integral) context.refuse(node, "with alpha on integers");
      b = context.op("Mul", {b, context.scalar(context.number(node->input(2)))});
    }
    if (reversed) std::swap(a, b);
    bind_tensor(context, node, context.op(op_type, {a, b}));
  };
}

void gelu(Context& context, const Node* node) {
  const std::string mode =
      node->inputs().size() > 1 ? context.constant(node->input(1)).toStringRef() : std::string("none");
  bind_tensor(context, node, gelu_of(context, context.tensor(node->input(0)), mode == "tanh"));
}

void hard_sigmoid_based(Context& context, const Node* node, bool times_x) {
  const std::string x = context.tensor(node->input(0));
  onnx::NodeProto& gate = context.node("HardSigmoid", {x});
  set_attribute(gate, "alpha", static_cast<float>(1.0 / 6.0));
  set_attribute(gate, "beta", 0.5f);
  bind_tensor(context, node, times_x ? context.op("Mul", {x, gate.output(0)}) : gate.output(0));
}

// Clip with optional bounds (None: that side open).
void clip(Context& context, const Node* node, const jit::Value* low, const jit::Value* high) {
  const std::string lower =
      low == nullptr || is_none(context, low) ? "" : context.scalar(context.number(low));
  const std::string upper =
      high == nullptr || is_none(context, high) ? "" : context.scalar(context.number(high));
  bind_tensor(context, node, context.op("Clip", {context.tensor(node->input(0)), lower, upper}));
}

void add_activations(ScriptOpTable& table) {
  for (const char* name : {"aten::relu", "aten::relu_"})
    table[name] = unary("Relu");
  for (const auto& [name, op] :
       std::vector<std::pair<std::string, std::string>>{{"aten::sigmoid", "Sigmoid"},
                                                        {"aten::tanh", "Tanh"},
                                                        {"aten::exp", "Exp"},
                                                        {"aten::log", "Log"},
                                                        {"aten::sqrt", "Sqrt"},
                                                        {"aten::abs", "Abs"},
                                                        {"aten::neg", "Neg"},
                                                        {"aten::erf", "Erf"},
                                                        {"aten::reciprocal", "Reciprocal"}})
    table[name] = unary(op);
  table["aten::rsqrt"] = [](Context& context, const Node* node) {
    bind_tensor(context, node,
                context.op("Reciprocal", {context.op("Sqrt", {context.tensor(node->input(0))})}));
  };
  table["aten::silu"] = [](Context& context, const Node* node) {
    const std::string x = context.tensor(node->input(0));
    bind_tensor(context, node, context.op("Mul", {x, context.op("Sigmoid", {x})}));
  };
  table["aten::gelu"] = gelu;
  table["aten::hardswish"] = [](Context& context, const Node* node) {
    hard_sigmoid_based(context, node, true);
  };
  table["aten::hardsigmoid"] = [](Context& context, const Node* node) {
    hard_sigmoid_based(context, node, false);
  };
  table["aten::leaky_relu"] = [](Context& context, const Node* node) {
    onnx::NodeProto& relu = context.node("LeakyRelu", {context.tensor(node->input(0))});
    set_attribute(relu, "alpha", static_cast<float>(context.number(node->input(1))));
    bind_tensor(context, node, relu.output(0));
  };
  table["aten::elu"] = [](Context& context, const Node* node) {
    if (context.number(node->input(2)) != 1.0 || context.number(node->input(3)) != 1.0)
      context.refuse(node, "with scale or input_scale other than 1");
    onnx::NodeProto& elu = context.node("Elu", {context.tensor(node->input(0))});
    set_attribute(elu, "alpha", static_cast<float>(context.number(node->input(1))));
    bind_tensor(context, node, elu.output(0));
  };
  table["aten::relu6"] = [](Context& context, const Node* node) {
    bind_tensor(context, node,
                context.op("Clip", {context.tensor(node->input(0)), context.scalar(0), context.scalar(6)}));
  };
  table["aten::hardtanh"] = [](Context& context, const Node* node) {
    clip(context, node, node->input(1), node->input(2));
  };
  table["aten::clamp"] = table["aten::hardtanh"];
  table["aten::clamp_min"] = [](Context& context, const Node* node) {
    clip(context, node, node->input(1), nullptr);
  };
  table["aten::clamp_max"] = [](Context& context, const Node* node) {
    clip(context, node, nullptr, node->input(1));
  };
  for (const auto& [name, op] : std::vector<std::pair<std::string, std::string>>{
           {"aten::softmax", "Softmax"}, {"aten::log_softmax", "LogSoftmax"}})
    table[name] = [op = op](Context& context, const Node* node) {
      if (node->inputs().size() > 2 && !is_none(context, node->input(2)))
        context.refuse(node, "with a dtype argument");
      onnx::NodeProto& softmax = context.node(op, {context.tensor(node->input(0))});
      set_attribute(softmax, "axis", context.dim(node->input(0), context.integer(node->input(1))));
      bind_tensor(context, node, softmax.output(0));
    };
}

void add_arithmetic(ScriptOpTable& table) {
  table["aten::add"] = binary("Add");
  table["aten::sub"] = binary("Sub");
  table["aten::rsub"] = binary("Sub", true);
  table["aten::mul"] = binary("Mul");
  table["aten::div"] = binary("Div");
  table["aten::floordiv"] = binary("Div");
  table["aten::floor_divide"] = binary("Div");
  table["aten::pow"] = [](Context& context, const Node* node) {
    bind_tensor(context, node,
                context.op("Pow", {context.tensor(node->input(0)), context.tensor(node->input(1))}));
  };
  for (const char* name : {"aten::matmul", "aten::bmm"})
    table[name] = [](Context& context, const Node* node) {
      bind_tensor(context, node,
                  context.op("MatMul", {context.tensor(node->input(0)), context.tensor(node->input(1))}));
    };
  // Identities in inference: copies, dropout (eval), integer/scalar conversions, layout.
  for (const char* name : {"aten::contiguous", "aten::clone", "aten::detach", "aten::dropout",
                           "aten::feature_dropout", "aten::alpha_dropout", "aten::feature_alpha_dropout",
                           "aten::Int", "aten::ScalarImplicit", "prim::NumToTensor", "aten::dropout_"})
    table[name] = pass_through();
  for (const char* name : {"aten::to", "aten::type_as"})
    table[name] = [](Context& context, const Node* node) {
      if (context.integral(node->output()) != context.integral(node->input(0)))
        context.refuse(node, "changing between integer and float types");
      context.bind(node->output(), context.sym(node->input(0)));
    };
}

// A list of ints (possibly batch-dependent) as a 1-d int64 tensor with -1 entries replaced by `minus_one`.
std::string shape_list(Context& context, const jit::Value* value, std::optional<std::int64_t> minus_one) {
  Sym list = context.sym(value);
  if (minus_one && list.kind == Sym::Kind::constant) {
    std::vector<std::int64_t> values = list.value.toIntVector();
    for (std::int64_t& entry : values)
      if (entry == -1) entry = *minus_one;
    return context.int64s(values);
  }
  if (minus_one)
    for (Sym& item : list.items)
      if (item.kind == Sym::Kind::constant && item.value.isInt() && item.value.toInt() == -1)
        item.value = *minus_one;
  return context.int64_tensor(list);
}

void transpose_to(Context& context, const Node* node, std::vector<std::int64_t> perm) {
  onnx::NodeProto& transpose = context.node("Transpose", {context.tensor(node->input(0))});
  set_attribute(transpose, "perm", perm);
  bind_tensor(context, node, transpose.output(0));
}

std::vector<std::int64_t> identity_perm(std::int64_t rank) {
  std::vector<std::int64_t> perm(static_cast<std::size_t>(rank));
  for (std::int64_t index = 0; index < rank; ++index)
    perm[static_cast<std::size_t>(index)] = index;
  return perm;
}

void add_reshapes(ScriptOpTable& table) {
  for (const char* name : {"aten::view", "aten::reshape"})
    table[name] = [](Context& context, const Node* node) {
      bind_tensor(
          context, node,
          context.op("Reshape", {context.tensor(node->input(0)), shape_list(context, node->input(1), {})}));
    };
  table["aten::flatten"] = [](Context& context, const Node* node) {  // kept leading dims copied (0)
    const jit::Value* x = node->input(0);
    const std::vector<std::int64_t> shape = context.shape(x);
    const std::int64_t start = context.dim(x, context.integer(node->input(1)));
    const std::int64_t end = context.dim(x, context.integer(node->input(2)));
    std::vector<std::int64_t> target(static_cast<std::size_t>(start), 0);
    target.push_back(-1);
    for (std::int64_t index = end + 1; index < static_cast<std::int64_t>(shape.size()); ++index)
      target.push_back(shape[static_cast<std::size_t>(index)]);
    if (shape.empty()) target = {1};
    bind_tensor(context, node, context.op("Reshape", {context.tensor(x), context.int64s(target)}));
  };
  table["aten::unflatten"] = [](Context& context, const Node* node) {
    const jit::Value* x = node->input(0);
    const std::vector<std::int64_t> shape = context.shape(x);
    const std::int64_t dim = context.dim(x, context.integer(node->input(1)));
    std::vector<std::int64_t> target(static_cast<std::size_t>(dim), 0);
    for (const std::int64_t size : context.ints(node->input(2)))
      target.push_back(size);
    for (std::int64_t index = dim + 1; index < static_cast<std::int64_t>(shape.size()); ++index)
      target.push_back(shape[static_cast<std::size_t>(index)]);
    bind_tensor(context, node, context.op("Reshape", {context.tensor(x), context.int64s(target)}));
  };
  table["aten::permute"] = [](Context& context, const Node* node) {
    std::vector<std::int64_t> perm = context.ints(node->input(1));
    for (std::int64_t& entry : perm)
      entry = context.dim(node->input(0), entry);
    transpose_to(context, node, perm);
  };
  table["aten::transpose"] = [](Context& context, const Node* node) {
    std::vector<std::int64_t> perm = identity_perm(context.rank(node->input(0)));
    const std::int64_t a = context.dim(node->input(0), context.integer(node->input(1)));
    const std::int64_t b = context.dim(node->input(0), context.integer(node->input(2)));
    std::swap(perm[static_cast<std::size_t>(a)], perm[static_cast<std::size_t>(b)]);
    transpose_to(context, node, perm);
  };
  table["aten::t"] = [](Context& context, const Node* node) {
    if (context.rank(node->input(0)) < 2) return context.bind(node->output(), context.sym(node->input(0)));
    transpose_to(context, node, {1, 0});
  };
  table["aten::unsqueeze"] = [](Context& context, const Node* node) {
    std::int64_t dim = context.integer(node->input(1));
    if (dim < 0) dim += context.rank(node->input(0)) + 1;
    bind_tensor(context, node,
                context.op("Unsqueeze", {context.tensor(node->input(0)), context.int64s({dim})}));
  };
  table["aten::squeeze"] = [](Context& context, const Node* node) {
    const std::vector<std::int64_t> shape = context.shape(node->input(0));
    std::vector<std::int64_t> axes;
    if (node->inputs().size() > 1) {
      const std::int64_t dim = context.dim(node->input(0), context.integer(node->input(1)));
      if (shape.at(static_cast<std::size_t>(dim)) == 1) axes.push_back(dim);
    } else {
      for (std::size_t index = 1; index < shape.size(); ++index)
        if (shape[index] == 1) axes.push_back(static_cast<std::int64_t>(index));
    }
    if (axes.empty()) return context.bind(node->output(), context.sym(node->input(0)));
    bind_tensor(context, node, context.op("Squeeze", {context.tensor(node->input(0)), context.int64s(axes)}));
  };
  table["aten::expand"] = [](Context& context, const Node* node) {  // -1 keeps the dim: broadcast with 1
    bind_tensor(
        context, node,
        context.op("Expand", {context.tensor(node->input(0)), shape_list(context, node->input(1), 1)}));
  };
  table["aten::expand_as"] = [](Context& context, const Node* node) {
    const std::string shape = context.op("Shape", {context.tensor(node->input(1))});
    bind_tensor(context, node, context.op("Expand", {context.tensor(node->input(0)), shape}));
  };
}

// One int (constant or batch-dependent) as a 1-d int64 tensor [value]; None gives `otherwise`.
std::string one_element(Context& context, const jit::Value* value, std::int64_t otherwise) {
  if (is_none(context, value)) return context.int64s({otherwise});
  const Sym& sym = context.sym(value);
  if (sym.kind == Sym::Kind::constant) return context.int64s({context.integer(value)});
  return context.op("Unsqueeze", {context.int64_tensor(value), context.int64s({0})});
}

// Splits `x` along `dim` into pieces of `sizes`; binds the node's list output (or its outputs).
void split_into(Context& context, const Node* node, const std::vector<std::int64_t>& sizes, std::int64_t dim,
                bool squeeze) {
  onnx::NodeProto& split = context.node("Split", {context.tensor(node->input(0)), context.int64s(sizes)},
                                        static_cast<int>(sizes.size()));
  set_attribute(split, "axis", dim);
  std::vector<Sym> pieces;
  for (int index = 0; index < split.output_size(); ++index) {
    std::string piece = split.output(index);
    if (squeeze) piece = context.op("Squeeze", {piece, context.int64s({dim})});
    pieces.push_back(Sym::tensor(piece));
  }
  if (node->outputs().size() == 1 && node->output()->type()->kind() == c10::TypeKind::ListType) {
    context.bind(node->output(), Sym::list(pieces));
    return;
  }
  if (node->outputs().size() != pieces.size()) context.refuse(node, "with a split the exporter cannot count");
  for (std::size_t index = 0; index < pieces.size(); ++index)
    context.bind(node->outputs()[index], pieces[index]);
}

std::vector<std::int64_t> even_pieces(std::int64_t total, std::int64_t piece) {
  std::vector<std::int64_t> sizes;
  for (std::int64_t start = 0; start < total; start += piece)
    sizes.push_back(std::min(piece, total - start));
  return sizes;
}

void add_slicing(ScriptOpTable& table) {
  table["aten::select"] = [](Context& context, const Node* node) {
    const std::int64_t dim = context.dim(node->input(0), context.integer(node->input(1)));
    onnx::NodeProto& gather =
        context.node("Gather", {context.tensor(node->input(0)), context.int64_tensor(node->input(2))});
    set_attribute(gather, "axis", dim);
    bind_tensor(context, node, gather.output(0));
  };
  table["aten::slice"] = [](Context& context, const Node* node) {
    if (node->input(0)->type()->kind() != c10::TypeKind::TensorType)
      context.refuse(node, "on a dynamic list");
    const std::int64_t dim = context.dim(node->input(0), context.integer(node->input(1)));
    const std::string starts = one_element(context, node->input(2), 0);
    const std::string ends = one_element(context, node->input(3), std::numeric_limits<std::int64_t>::max());
    const std::string steps = context.int64s({context.integer(node->input(4))});
    bind_tensor(
        context, node,
        context.op("Slice", {context.tensor(node->input(0)), starts, ends, context.int64s({dim}), steps}));
  };
  for (const char* name : {"aten::chunk", "aten::unsafe_chunk"})
    table[name] = [](Context& context, const Node* node) {
      const std::int64_t dim = context.dim(node->input(0), context.integer(node->input(2)));
      const std::int64_t total = context.shape(node->input(0)).at(static_cast<std::size_t>(dim));
      const std::int64_t chunks = context.integer(node->input(1));
      split_into(context, node, even_pieces(total, (total + chunks - 1) / chunks), dim, false);
    };
  for (const char* name : {"aten::split", "aten::unsafe_split", "aten::split_with_sizes"})
    table[name] = [](Context& context, const Node* node) {
      const std::int64_t dim = context.dim(node->input(0), context.integer(node->input(2)));
      const c10::IValue sizes = context.constant(node->input(1));
      const std::int64_t total = context.shape(node->input(0)).at(static_cast<std::size_t>(dim));
      split_into(context, node, sizes.isInt() ? even_pieces(total, sizes.toInt()) : sizes.toIntVector(), dim,
                 false);
    };
  table["aten::unbind"] = [](Context& context, const Node* node) {
    const std::int64_t dim = context.dim(node->input(0), context.integer(node->input(1)));
    const std::int64_t total = context.shape(node->input(0)).at(static_cast<std::size_t>(dim));
    split_into(context, node, std::vector<std::int64_t>(static_cast<std::size_t>(total), 1), dim, true);
  };
}

std::vector<const jit::Value*> list_values(const jit::Value* list) {
  if (list->node()->kind() != c10::prim::ListConstruct) return {};
  return {list->node()->inputs().begin(), list->node()->inputs().end()};
}

void concatenate(Context& context, const Node* node, bool stack) {
  const std::vector<const jit::Value*> items = list_values(node->input(0));
  if (items.empty()) context.refuse(node, "on a list the exporter cannot see through");
  std::int64_t dim = context.integer(node->input(1));
  const std::int64_t rank = context.rank(items[0]) + (stack ? 1 : 0);
  if (dim < 0) dim += rank;
  std::vector<std::string> parts;
  for (const jit::Value* item : items) {
    parts.push_back(context.tensor(item));
    if (stack) parts.back() = context.op("Unsqueeze", {parts.back(), context.int64s({dim})});
  }
  onnx::NodeProto& concat = context.node("Concat", parts);
  set_attribute(concat, "axis", dim);
  bind_tensor(context, node, concat.output(0));
}

void add_lists(ScriptOpTable& table) {
  table["aten::cat"] = [](Context& context, const Node* node) { concatenate(context, node, false); };
  table["aten::stack"] = [](Context& context, const Node* node) { concatenate(context, node, true); };
  for (const char* name : {"prim::ListConstruct", "prim::TupleConstruct"})
    table[name] = [](Context& context, const Node* node) {
      std::vector<Sym> items;
      for (const jit::Value* input : node->inputs())
        items.push_back(context.sym(input));
      context.bind(node->output(), Sym::list(items));
    };
  for (const char* name : {"prim::ListUnpack", "prim::TupleUnpack"})
    table[name] = [](Context& context, const Node* node) {
      const Sym& list = context.sym(node->input(0));
      if (list.kind != Sym::Kind::list || list.items.size() != node->outputs().size())
        context.refuse(node, "on a list of unknown length");
      for (std::size_t index = 0; index < list.items.size(); ++index)
        context.bind(node->outputs()[index], list.items[index]);
    };
  for (const char* name : {"aten::__getitem__", "prim::TupleIndex"})
    table[name] = [](Context& context, const Node* node) {
      const Sym& list = context.sym(node->input(0));
      std::int64_t index = context.integer(node->input(1));
      if (list.kind != Sym::Kind::list) context.refuse(node, "on a value that is not a list");
      if (index < 0) index += static_cast<std::int64_t>(list.items.size());
      context.bind(node->output(), list.items.at(static_cast<std::size_t>(index)));
    };
  table["aten::size"] = [](Context& context, const Node* node) {
    const jit::Value* x = node->input(0);
    const std::string shape = context.op("Shape", {context.tensor(x)});
    auto dim_of = [&](std::int64_t dim) {
      if (context.static_dim(x, dim)) return Sym::constant(context.shape(x)[static_cast<std::size_t>(dim)]);
      onnx::NodeProto& gather = context.node("Gather", {shape, context.initializer(torch::tensor(dim))});
      set_attribute(gather, "axis", std::int64_t{0});
      return Sym::tensor(gather.output(0));
    };
    if (node->inputs().size() > 1)
      return context.bind(node->output(), dim_of(context.dim(x, context.integer(node->input(1)))));
    std::vector<Sym> dims;
    for (std::int64_t dim = 0; dim < context.rank(x); ++dim)
      dims.push_back(dim_of(dim));
    context.bind(node->output(), Sym::list(dims));
  };
}

}  // namespace

void add_tensor_op_converters(ScriptOpTable& table) {
  add_activations(table);
  add_arithmetic(table);
  add_reshapes(table);
  add_slicing(table);
  add_lists(table);
}

std::string gelu_of(ScriptOnnxContext& context, const std::string& x, bool tanh_approximation) {
  std::string inner;
  if (tanh_approximation) {  // tanh(sqrt(2/pi) * (x + 0.044715 x^3))
    const std::string cube = context.op("Mul", {x, context.op("Mul", {x, x})});
    const std::string sum = context.op("Add", {x, context.op("Mul", {cube, context.scalar(0.044715)})});
    inner = context.op("Tanh", {context.op("Mul", {sum, context.scalar(std::sqrt(2.0 / M_PI))})});
  } else {  // erf(x / sqrt(2))
    inner = context.op("Erf", {context.op("Div", {x, context.scalar(std::sqrt(2.0))})});
  }
  const std::string half = context.op("Mul", {x, context.scalar(0.5)});
  return context.op("Mul", {half, context.op("Add", {inner, context.scalar(1.0)})});
}

}  // namespace ipj::exporter
