// One handler per TorchScript operator the graph IR covers. Values are IR nodes (tensors), constants (from
// prim::Constant: weights, ints, lists) or the batch size (aten::size(x, 0), for x.view(x.size(0), -1), or
// x.shape[0]: aten::size(x) then aten::__getitem__ 0).
// Ranks are tracked per node so BatchNorm, flatten and linear can be checked without running the model.
#include <torch/csrc/jit/ir/constants.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "import_ops.hpp"
#include "ipj/core/error.hpp"

namespace ipj::quant {
namespace {

namespace jit = torch::jit;

constexpr std::int64_t kBatch = -2;  // an int value that is the batch size

struct ValueRef {
  std::optional<std::size_t> node;  // a tensor computed by graph node `node`
  c10::IValue constant;             // otherwise a constant (None when unset)
  bool batch = false;               // the batch size
  std::vector<std::int64_t> list;   // int lists that contain the batch size (kBatch)
  bool is_list = false;
  bool sizes =
      false;  // a tensor's whole size list (x.shape, x.size()): only its item 0, the batch size, is read
};

class Walker {
 public:
  Walker(std::string where, const std::vector<std::int64_t>& input_shape) : where_(std::move(where)) {
    GraphNode input;
    input.kind = NodeKind::input;
    input.name = "input";
    graph_.input_shape = input_shape;
    graph_.nodes.push_back(input);
    names_.insert("input");
    ranks_.push_back(static_cast<int>(input_shape.size()) + 1);
  }

  Graph run(const jit::Graph& graph);

 private:
  std::string where_;
  Graph graph_;
  std::set<std::string> names_;
  std::vector<int> ranks_;  // per graph node
  std::unordered_map<const jit::Value*, ValueRef> values_;
  const jit::Node* current_ = nullptr;

  [[noreturn]] void refuse(const std::string& why) const {
    const ModulePlace place = module_place(current_);
    const std::string module = place.path.empty() ? "the top-level module" : "module '" + place.path + "'";
    fail(ErrorCategory::unsupported,
         "'" + where_ + "': operator " + current_->kind().toQualString() + " in " + module +
             (place.class_name.empty() ? "" : " (" + place.class_name + ")") + " " + why +
             ". ipj's graph IR (int8, pruning, ONNX export, the XNNPACK and oneDNN runtimes) covers conv2d, "
             "batch_norm, linear, relu, relu6/hardtanh, clamp, add, max/avg/adaptive-avg pooling, mean over "
             "H,W, "
             "flatten/view, dropout; the model still runs as fp32 (eager or frozen), bf16 or jit");
  }

  std::size_t tensor(const jit::Value* value) {
    const auto found = values_.find(value);
    if (found == values_.end() || !found->second.node)
      refuse("reads a tensor that is not computed from the input");
    return *found->second.node;
  }
  c10::IValue constant(const jit::Value* value) {
    const auto found = values_.find(value);
    if (found == values_.end() || found->second.node || found->second.batch || found->second.is_list)
      refuse("has an argument computed at run time");
    return found->second.constant;
  }
  torch::Tensor weight(const jit::Value* value) {
    const c10::IValue constant_value = constant(value);
    if (constant_value.isNone()) return torch::Tensor();
    if (!constant_value.isTensor()) refuse("has a non-tensor weight");
    return constant_value.toTensor().detach().to(torch::kFloat).contiguous().clone();
  }
  std::int64_t integer(const jit::Value* value) { return constant(value).toInt(); }
  double number(const jit::Value* value) { return constant(value).toScalar().toDouble(); }
  bool flag(const jit::Value* value) { return constant(value).toBool(); }
  Pair pair(const jit::Value* value, std::int64_t fallback) {
    const std::vector<std::int64_t> list = constant(value).toIntVector();
    if (list.empty()) return {fallback, fallback};
    if (list.size() == 1) return {list[0], list[0]};
    if (list.size() != 2) refuse("has a " + std::to_string(list.size()) + "-D window (2-D only)");
    return {list[0], list[1]};
  }

  std::string node_name(const std::string& operation) {
    const ModulePlace place = module_place(current_);
    const bool own_module = place.class_name.rfind("torch.nn.modules.", 0) == 0 && !place.path.empty();
    std::string base = own_module ? place.path : (place.path.empty() ? "" : place.path + ".") + operation;
    std::string name = base;
    for (int suffix = 1; names_.count(name); ++suffix)
      name = base + "_" + std::to_string(suffix);
    names_.insert(name);
    return name;
  }
  std::size_t add_node(GraphNode node, int rank, const std::string& operation) {
    node.name = node_name(operation);
    graph_.nodes.push_back(std::move(node));
    ranks_.push_back(rank);
    return graph_.nodes.size() - 1;
  }
  void set_output(std::size_t node) { values_[current_->output(0)].node = node; }
  void alias_output(const jit::Value* input) { values_[current_->output(0)] = values_.at(input); }
  void check_in_place(const jit::Value* mutated) {
    for (const jit::Use& use : mutated->uses())
      if (use.user != current_ && use.user->isAfter(current_))
        refuse("changes a tensor in place that is read again later");
  }

  void convolution(bool underscore);
  void batch_norm();
  void linear();
  void activation(const Activation& activation, const std::string& name);
  void add();
  void pool(NodeKind kind);
  void mean();
  void flatten();
  void reshape();
  void list_construct();
  void size();
  void size_item();
  bool handle(const std::string& kind);
};

void Walker::convolution(bool underscore) {
  const auto in = current_->inputs();
  GraphNode node;
  node.kind = NodeKind::conv2d;
  node.weight = weight(in[1]);
  if (!node.weight.defined() || node.weight.dim() != 4) refuse("is not a 2-D convolution");
  node.bias = weight(in[2]);
  if (!node.bias.defined()) node.bias = torch::zeros({node.weight.size(0)});
  node.stride = pair(in[3], 1);
  node.dilation = pair(in[5], 1);
  const c10::IValue padding = constant(in[4]);
  if (padding.isString()) {
    const std::string mode = padding.toStringRef();
    for (int axis = 0; axis < 2; ++axis) {
      const std::int64_t total = node.dilation[axis] * (node.weight.size(2 + axis) - 1);
      if (mode == "same" && total % 2 != 0) refuse("has padding='same' with an even kernel");
      node.padding[axis] = mode == "same" ? total / 2 : 0;
    }
  } else {
    node.padding = pair(in[4], 0);
  }
  if (underscore && flag(in[6])) refuse("is a transposed convolution");
  node.groups = integer(in[underscore ? 8 : 6]);
  node.inputs = {tensor(in[0])};
  set_output(add_node(std::move(node), 4, "conv"));
}

// Folds into the conv/linear before it when that is its only reader; otherwise a depthwise 1x1 conv.
void Walker::batch_norm() {
  const auto in = current_->inputs();
  if (flag(in[5])) refuse("runs in training mode (save the model after model.eval())");
  const torch::Tensor running_mean = weight(in[3]);
  const torch::Tensor running_var = weight(in[4]);
  if (!running_mean.defined()) refuse("has no running statistics (track_running_stats=False)");
  torch::Tensor gamma = weight(in[1]), beta = weight(in[2]);
  if (!gamma.defined()) gamma = torch::ones_like(running_mean);
  if (!beta.defined()) beta = torch::zeros_like(running_mean);
  const torch::Tensor factor = gamma / torch::sqrt(running_var + number(in[7]));  // [C]
  const torch::Tensor shift = beta - running_mean * factor;                       // [C]
  const std::size_t producer = tensor(in[0]);
  GraphNode& before = graph_.nodes[producer];
  static const std::set<std::string> layers{"aten::conv2d", "aten::_convolution", "aten::linear"};
  const bool direct = layers.count(in[0]->node()->kind().toQualString()) && in[0]->uses().size() == 1;
  if (direct && has_weights(before) && before.weight.size(0) == factor.size(0)) {
    std::vector<std::int64_t> view(static_cast<std::size_t>(before.weight.dim()), 1);
    view[0] = -1;
    before.weight = before.weight * factor.view(view);
    before.bias = before.bias * factor + shift;
    set_output(producer);
    return;
  }
  if (ranks_[producer] != 4)
    refuse("is a BatchNorm that follows no linear layer (only 2-D BatchNorm is kept)");
  GraphNode node;
  node.kind = NodeKind::conv2d;
  node.weight = factor.view({-1, 1, 1, 1}).clone();  // [C, 1, 1, 1], groups = C
  node.bias = shift.clone();
  node.groups = factor.size(0);
  node.inputs = {producer};
  set_output(add_node(std::move(node), 4, "batch_norm"));
}

void Walker::linear() {
  const auto in = current_->inputs();
  GraphNode node;
  node.kind = NodeKind::linear;
  node.weight = weight(in[1]);
  node.bias = weight(in[2]);
  if (!node.bias.defined()) node.bias = torch::zeros({node.weight.size(0)});
  node.inputs = {tensor(in[0])};
  if (ranks_[node.inputs[0]] != 2) refuse("applies a linear layer to a tensor that is not [B, features]");
  set_output(add_node(std::move(node), 2, "linear"));
}

void Walker::activation(const Activation& activation, const std::string& name) {
  const std::size_t producer = tensor(current_->input(0));
  const std::string kind = current_->kind().toQualString();
  if (kind.back() == '_') check_in_place(current_->input(0));
  GraphNode node;
  node.kind = NodeKind::clamp;
  node.activation = activation;
  node.inputs = {producer};
  set_output(add_node(std::move(node), ranks_[producer], name));
}

void Walker::add() {
  const auto in = current_->inputs();
  if (!values_.count(in[1]) || !values_.at(in[1]).node) refuse("adds a constant (only tensor + tensor)");
  if (in.size() > 2 && number(in[2]) != 1.0) refuse("has alpha != 1");
  if (current_->kind() == c10::Symbol::fromQualString("aten::add_")) check_in_place(in[0]);
  GraphNode node;
  node.kind = NodeKind::add;
  node.inputs = {tensor(in[0]), tensor(in[1])};
  const int rank = std::max(ranks_[node.inputs[0]], ranks_[node.inputs[1]]);
  set_output(add_node(std::move(node), rank, "add"));
}

void Walker::pool(NodeKind kind) {
  const auto in = current_->inputs();
  GraphNode node;
  node.kind = kind;
  node.inputs = {tensor(in[0])};
  if (ranks_[node.inputs[0]] != 4) refuse("pools a tensor that is not [B, C, H, W]");
  if (kind == NodeKind::adaptive_avg_pool2d) {
    node.output_size = pair(in[1], 1);
  } else {
    node.kernel = pair(in[1], 1);
    node.stride = pair(in[2], 0);
    if (node.stride[0] == 0) node.stride = node.kernel;  // stride=[] means stride = kernel
    node.padding = pair(in[3], 0);
    if (kind == NodeKind::max_pool2d) {
      node.dilation = pair(in[4], 1);
      node.ceil_mode = flag(in[5]);
    } else {
      node.ceil_mode = flag(in[4]);
      node.count_include_pad = flag(in[5]);
      if (!constant(in[6]).isNone()) refuse("has divisor_override");
    }
  }
  set_output(add_node(std::move(node), 4, node_kind_name(kind)));
}

// mean over (H, W) = global average pooling (+ flatten without keepdim).
void Walker::mean() {
  const auto in = current_->inputs();
  const std::size_t producer = tensor(in[0]);
  const std::vector<std::int64_t> dims = constant(in[1]).toIntVector();
  std::set<std::int64_t> axes;
  for (const std::int64_t dim : dims)
    axes.insert(dim < 0 ? dim + 4 : dim);
  if (ranks_[producer] != 4 || axes != std::set<std::int64_t>{2, 3})
    refuse("is a mean over other axes than H, W");
  GraphNode node;
  node.kind = NodeKind::adaptive_avg_pool2d;
  node.inputs = {producer};
  std::size_t index = add_node(std::move(node), 4, "mean");
  if (!flag(in[2])) {
    GraphNode flat;
    flat.kind = NodeKind::flatten;
    flat.inputs = {index};
    index = add_node(std::move(flat), 2, "flatten");
  }
  set_output(index);
}

void Walker::flatten() {
  const auto in = current_->inputs();
  const std::size_t producer = tensor(in[0]);
  const std::int64_t rank = ranks_[producer];
  std::int64_t start = integer(in[1]), end = integer(in[2]);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  if (start != 1 || end != rank - 1) refuse("flattens other dimensions than 1..last");
  if (rank == 2) return set_output(producer);
  GraphNode node;
  node.kind = NodeKind::flatten;
  node.inputs = {producer};
  set_output(add_node(std::move(node), 2, "flatten"));
}

// view/reshape to [B, -1], [B, K] or [-1, K]: a flatten (the trial run after import checks the sizes).
void Walker::reshape() {
  const auto in = current_->inputs();
  const std::size_t producer = tensor(in[0]);
  const ValueRef& shape = values_.at(in[1]);
  std::vector<std::int64_t> list = shape.is_list ? shape.list : constant(in[1]).toIntVector();
  const bool flat = list.size() == 2 && (list[0] == kBatch || (list[0] == -1 && list[1] > 0));
  if (!flat) refuse("reshapes to something other than [batch, features]");
  if (ranks_[producer] == 2) return set_output(producer);
  GraphNode node;
  node.kind = NodeKind::flatten;
  node.inputs = {producer};
  set_output(add_node(std::move(node), 2, "flatten"));
}

void Walker::list_construct() {
  ValueRef ref;
  ref.is_list = true;
  for (const jit::Value* item : current_->inputs()) {
    const auto found = values_.find(item);
    if (found != values_.end() && found->second.batch) {
      ref.list.push_back(kBatch);
    } else if (found != values_.end() && found->second.node) {  // tensors for cat/stack: not in the graph
      const auto& uses = current_->output(0)->uses();
      const std::string reader = uses.empty() ? "nothing" : uses[0].user->kind().toQualString();
      refuse("collects computed tensors for " + reader +
             " (joining tensors, e.g. torch.cat or torch.stack, is not in ipj's graph)");
    } else {
      const c10::IValue value = constant(item);
      if (!value.isInt()) refuse("builds a list of non-integers");
      ref.list.push_back(value.toInt());
    }
  }
  values_[current_->output(0)] = ref;
}

void Walker::size() {
  const auto in = current_->inputs();
  tensor(in[0]);
  if (in.size() == 1) {  // x.shape / x.size(): B = x.shape[0] reads item 0 of it (size_item)
    values_[current_->output(0)].sizes = true;
    return;
  }
  if (in.size() != 2 || integer(in[1]) != 0) refuse("reads a tensor size other than the batch size");
  values_[current_->output(0)].batch = true;
}

void Walker::size_item() {
  const auto in = current_->inputs();
  const auto found = values_.find(in[0]);
  if (found == values_.end() || !found->second.sizes) refuse("indexes a list ipj's graph does not hold");
  if (integer(in[1]) != 0) refuse("reads a tensor size other than the batch size");
  values_[current_->output(0)].batch = true;
}

bool Walker::handle(const std::string& kind) {
  static const std::set<std::string> identities{
      "aten::dropout",       "aten::dropout_",    "aten::feature_dropout",
      "aten::alpha_dropout", "aten::contiguous",  "aten::detach",
      "aten::clone",         "prim::NumToTensor", "aten::Int"};
  const auto in = current_->inputs();
  if (kind == "prim::Constant") {
    values_[current_->output(0)].constant = *jit::toIValue(current_->output(0));
  } else if (identities.count(kind)) {
    if (kind.find("dropout") != std::string::npos && flag(in[2])) refuse("is a dropout in training mode");
    alias_output(in[0]);
  } else if (kind == "aten::conv2d" || kind == "aten::_convolution") {
    convolution(kind == "aten::_convolution");
  } else if (kind == "aten::batch_norm") {
    batch_norm();
  } else if (kind == "aten::linear") {
    linear();
  } else if (kind == "aten::relu" || kind == "aten::relu_") {
    activation({ActivationKind::relu, 0.0, 0.0}, "relu");
  } else if (kind == "aten::relu6" || kind == "aten::relu6_") {
    activation({ActivationKind::clamp, 0.0, 6.0}, "relu6");
  } else if (kind == "aten::hardtanh" || kind == "aten::hardtanh_" || kind == "aten::clamp" ||
             kind == "aten::clamp_") {
    const c10::IValue low = constant(in[1]), high = constant(in[2]);
    const double inf = std::numeric_limits<double>::infinity();
    Activation clamp{ActivationKind::clamp, low.isNone() ? -inf : low.toScalar().toDouble(),
                     high.isNone() ? inf : high.toScalar().toDouble()};
    if (clamp.min == 0.0 && std::isinf(clamp.max)) clamp.kind = ActivationKind::relu;
    activation(clamp, clamp.min == 0.0 && clamp.max == 6.0 ? "relu6" : "clamp");
  } else if (kind == "aten::add" || kind == "aten::add_") {
    add();
  } else if (kind == "aten::max_pool2d") {
    pool(NodeKind::max_pool2d);
  } else if (kind == "aten::avg_pool2d") {
    pool(NodeKind::avg_pool2d);
  } else if (kind == "aten::adaptive_avg_pool2d") {
    pool(NodeKind::adaptive_avg_pool2d);
  } else if (kind == "aten::mean") {
    mean();
  } else if (kind == "aten::flatten") {
    flatten();
  } else if (kind == "aten::view" || kind == "aten::reshape") {
    reshape();
  } else if (kind == "prim::ListConstruct") {
    list_construct();
  } else if (kind == "aten::size") {
    size();
  } else if (kind == "aten::__getitem__") {
    size_item();
  } else {
    return false;
  }
  return true;
}

Graph Walker::run(const jit::Graph& graph) {
  const auto inputs = graph.inputs();
  // inputs[0] is the frozen module itself; forward(self, x) has one tensor argument
  if (inputs.size() != 2) {
    fail(ErrorCategory::unsupported, "'" + where_ + "': forward takes " + std::to_string(inputs.size() - 1) +
                                         " arguments; ipj imports models with one input tensor");
  }
  values_[inputs[1]].node = 0;
  for (const jit::Node* node : graph.nodes()) {
    current_ = node;
    const std::string kind = node->kind().toQualString();
    if (!handle(kind)) refuse("is not supported");
  }
  const auto outputs = graph.outputs();
  const auto found = values_.find(outputs.at(0));
  if (outputs.size() != 1 || found == values_.end() || !found->second.node || *found->second.node == 0)
    fail(ErrorCategory::unsupported,
         "'" + where_ + "': forward must return one tensor computed from its input (a classifier's logits)");
  // Keep only what the output needs, so that the output is the last node.
  const std::size_t output = *found->second.node;
  std::vector<bool> live(graph_.nodes.size(), false);
  live[output] = true;
  for (std::size_t index = output + 1; index-- > 0;)
    if (live[index])
      for (const std::size_t producer : graph_.nodes[index].inputs)
        live[producer] = true;
  std::vector<bool> erase(graph_.nodes.size(), false);
  for (std::size_t index = 0; index < graph_.nodes.size(); ++index)
    erase[index] = index != 0 && !live[index];
  erase_nodes(graph_, erase, std::vector<std::size_t>(graph_.nodes.size(), 0));
  return std::move(graph_);
}

}  // namespace

Graph walk_torchscript_graph(const jit::Graph& graph, const std::string& where,
                             const std::vector<std::int64_t>& input_shape) {
  Walker walker(where, input_shape);
  return walker.run(graph);
}

}  // namespace ipj::quant
