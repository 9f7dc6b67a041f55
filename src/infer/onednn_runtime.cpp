// The graph IR on oneDNN primitives (onednn_runtime.hpp): one primitive per node, made at load with oneDNN's
// preferred layouts ("any"), a reorder only where a reader wants another layout, weights reordered once, and
// activation buffers shared between nodes whose values do not live at the same time. oneDNN 2.x API.
#include "ipj/infer/onednn_runtime.hpp"

#include <atomic>

#include "ipj/core/error.hpp"
#include "ipj/core/number_format.hpp"
#include "ipj/device/threading.hpp"
#include "ipj/infer/xnnpack_runtime.hpp"

#ifdef IPJ_WITH_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>

#include "onednn_graph_parts.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>
#endif

namespace ipj::infer {

namespace {
std::atomic<std::uint64_t> onednn_calls_answered{0};  // onednn_runtime_calls()
}  // namespace

std::uint64_t onednn_runtime_calls() {
  return onednn_calls_answered.load();
}

#ifndef IPJ_WITH_ONEDNN

bool onednn_runtime_available() {
  return false;
}

std::shared_ptr<InferenceModel> onednn_runtime_model(const quant::Graph&, std::int64_t, int,
                                                     OnednnConvolutionKernel,
                                                     std::shared_ptr<const InferenceModel>) {
  fail(ErrorCategory::unsupported,
       "this ipj build has no oneDNN runtime (configure with Debian's libdnnl-dev and -DIPJ_ONEDNN=ON)");
}

std::vector<OnednnNodeKernel> onednn_runtime_kernels(const InferenceModel&) {
  return {};
}

std::string onednn_winograd_note(const InferenceModel&) {
  return "";
}

#else

namespace onednn_graph {  // named: the unity build joins this file with others that have a refuse() too

class OnednnRuntime : public InferenceModel {
 public:
  OnednnRuntime(const quant::Graph& graph, std::int64_t batch, int threads,
                OnednnConvolutionKernel convolutions, std::shared_ptr<const InferenceModel> busy)
      : graph_(graph),
        batch_(batch),
        threads_(threads),
        convolutions_(convolutions),
        busy_(std::move(busy)),
        engine_(dnnl::engine::kind::cpu, 0),
        stream_(engine_) {
    // oneDNN's kernels split their work for the OpenMP threads of the thread that creates them
    const device::CallerOpenMpThreads scope(threads_);
    build();
  }

  torch::Tensor forward(const torch::Tensor& input) const override {
    const torch::Tensor prepared = quant::prepare_graph_input(graph_, input).contiguous();  // [B, C, H, W]
    if (prepared.scalar_type() != torch::kFloat || prepared.sizes().vec() != input_dims_)
      fail(ErrorCategory::invalid_input, "oneDNN runtime built for input " + shape_text(input_dims_) +
                                             ", got " + shape_text(prepared.sizes().vec()));
    torch::Tensor output = torch::empty(output_dims_);
    std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
    if (!lock.owns_lock()) {  // another call holds the runtime
      if (busy_) return busy_->forward(input);
      lock.lock();
    }
    const device::CallerOpenMpThreads scope(threads_);
    if (runtime_calls_counted_on_this_thread()) onednn_calls_answered.fetch_add(1);
    input_.set_data_handle(prepared.data_ptr());
    output_.set_data_handle(output.data_ptr());
    for (const Step& step : steps_)
      step.primitive.execute(stream_, step.arguments);
    stream_.wait();
    return output;
  }

  const std::vector<OnednnNodeKernel>& kernels() const { return kernels_; }

 private:
  static std::string shape_text(const std::vector<std::int64_t>& dims) {
    std::string text = "[";
    for (std::size_t index = 0; index < dims.size(); ++index)
      text += (index ? ", " : "") + std::to_string(dims[index]);
    return text + "]";
  }

  void build();
  void plan_residual_fusions(const std::vector<std::vector<std::size_t> >& consumers,
                             std::vector<std::size_t>& last_use);
  void unfuse_residual(std::size_t conv) {  // the add runs alone after all
    fused_add_[residual_[conv].add] = 0;
    residual_[conv] = {};
  }
  void build_node(std::size_t index);
  // A convolution's or linear layer's step, made from its description (named in kernels()).
  template <class Primitive>
  void push_weighted_step(std::size_t index, const typename Primitive::primitive_desc& made,
                          const memory& input, const memory& weights, const memory& bias,
                          const memory& output) {
    kernels_.push_back(
        {graph_.nodes[index].name, made.impl_info_str(), graph_.nodes[index].kind == NodeKind::conv2d});
    push_step(
        Primitive(made),
        {{DNNL_ARG_SRC, input}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_BIAS, bias}, {DNNL_ARG_DST, output}});
  }
  // A step, its scratchpad (where it needs one) on the runtime's scratchpad slot: the steps run one at a
  // time, so one buffer of the largest serves them all.
  void push_step(dnnl::primitive primitive, std::unordered_map<int, memory> arguments) {
    const memory::desc scratchpad = scratchpad_of(primitive);
    if (scratchpad.get_size() > 0) {
      slots_.grow(scratchpad_slot_, scratchpad.get_size());
      arguments.emplace(DNNL_ARG_SCRATCHPAD, bound(scratchpad, scratchpad_slot_));
    }
    steps_.push_back({std::move(primitive), std::move(arguments)});
  }
  void add_convolution(std::size_t index);
  dnnl::convolution_forward::primitive_desc fastest_convolution(
      const ConvolutionGeometry& geometry, const ConvolutionRecipe& recipe,
      const dnnl::convolution_forward::primitive_desc& chosen, const memory::desc& stored_as,
      bool on_graph_input);
  void add_linear(std::size_t index);
  void add_add(std::size_t index);
  void add_clamp(std::size_t index);
  void add_pool(std::size_t index);
  void add_flatten(std::size_t index);

  // A memory object on value `index`'s buffer (bound when the slots are allocated).
  memory value_memory(std::size_t index) { return bound(values_[index].desc, values_[index].slot); }
  memory bound(const memory::desc& desc, int slot) {
    if (slot < 0) return input_;
    memory object(desc, engine_, DNNL_MEMORY_NONE);
    bindings_.emplace_back(object, slot);
    return object;
  }
  // Value `index` in layout `wanted`: itself, or a reorder into a temporary freed after this node.
  memory read_as(std::size_t index, const memory::desc& wanted) {
    if (values_[index].desc == wanted) return value_memory(index);
    const int slot = slots_.take(wanted.get_size());
    temporaries_.push_back(slot);
    memory target = bound(wanted, slot);
    push_step(runtime_reorder(value_memory(index), target),
              {{DNNL_ARG_FROM, value_memory(index)}, {DNNL_ARG_TO, target}});
    return target;
  }
  // The node's output buffer for `desc`.
  memory output_of(std::size_t index, const memory::desc& desc) {
    values_[index] = Value{desc, slots_.take(desc.get_size())};
    return value_memory(index);
  }
  // A constant (weights, bias) from `tensor` in `wanted`'s layout, owned by oneDNN.
  memory constant(const torch::Tensor& tensor, const memory::desc& given, const memory::desc& wanted) {
    const torch::Tensor values = tensor.detach().to(torch::kFloat).contiguous();
    memory source(given, engine_, values.data_ptr());
    memory target(wanted, engine_);
    dnnl::reorder(source, target).execute(stream_, source, target);
    stream_.wait();
    return target;
  }
  Dims dims_of(std::size_t index) const { return values_[index].desc.dims(); }

  quant::Graph graph_;
  std::int64_t batch_;
  int threads_;
  OnednnConvolutionKernel convolutions_;
  std::shared_ptr<const InferenceModel> busy_;  // runs calls that find the runtime held (null: they wait)
  std::vector<OnednnNodeKernel> kernels_;
  dnnl::engine engine_;
  mutable dnnl::stream stream_;
  mutable std::mutex mutex_;
  std::vector<Step> steps_;
  mutable memory input_, output_;
  std::vector<std::int64_t> input_dims_, output_dims_;
  std::vector<Value> values_;
  std::vector<std::size_t> alias_of_;  // a flatten read only by linear layers: its producer's value
  // A residual add fused into the convolution feeding it (oneDNN's sum post-op: the convolution adds its
  // result onto the add's other operand's buffer). Node indices; add 0 (the graph's input): not fused.
  struct ResidualSum {
    std::size_t add = 0, onto = 0;
  };
  std::vector<ResidualSum> residual_;   // by convolution
  std::vector<std::size_t> fused_add_;  // by add: the convolution that writes its sum + 1; 0: runs alone
  SlotPlanner slots_;
  int scratchpad_slot_ = -1;  // every step's scratchpad (taken first, never released)
  std::vector<int> temporaries_;
  std::vector<std::pair<memory, int> > bindings_;
  std::vector<torch::Tensor> buffers_;  // one per slot
};

void OnednnRuntime::build() {
  const std::vector<std::int64_t> sample(graph_.input_shape.begin(), graph_.input_shape.end());
  std::vector<std::int64_t> raw{batch_};
  raw.insert(raw.end(), sample.begin(), sample.end());
  input_dims_ = quant::prepare_graph_input(graph_, torch::zeros(raw)).sizes().vec();
  if (input_dims_.size() != 4 && input_dims_.size() != 2)
    fail(ErrorCategory::unsupported, "oneDNN runtime: inputs of 2 or 4 dimensions only");
  input_ = memory(plain(input_dims_), engine_, DNNL_MEMORY_NONE);
  scratchpad_slot_ = slots_.take(0);
  values_.assign(graph_.nodes.size(), Value{plain(input_dims_), -1});
  // Flattens read only by linear layers stay in their producer's layout (inner products read it).
  const auto consumers = quant::graph_consumers(graph_);
  alias_of_.resize(graph_.nodes.size());
  std::vector<std::size_t> last_use = quant::graph_last_readers(graph_);
  for (std::size_t index = 0; index < graph_.nodes.size(); ++index) {
    alias_of_[index] = index;
    const GraphNode& node = graph_.nodes[index];
    const bool linear_readers =
        !consumers[index].empty() &&
        std::all_of(consumers[index].begin(), consumers[index].end(),
                    [&](std::size_t reader) { return graph_.nodes[reader].kind == NodeKind::linear; });
    if (node.kind == NodeKind::flatten && linear_readers) {
      alias_of_[index] = alias_of_[node.inputs.at(0)];
      last_use[alias_of_[index]] = std::max(last_use[alias_of_[index]], last_use[index]);
    }
  }
  plan_residual_fusions(consumers, last_use);
  const std::size_t last = graph_.nodes.size() - 1;
  for (std::size_t index = 1; index < graph_.nodes.size(); ++index) {
    const quant::Activation& activation = graph_.nodes[index].activation;
    if (activation.kind == quant::ActivationKind::clamp && activation.min > activation.max)
      refuse(graph_.nodes[index], "a clamp whose min (" + format_number("%g", activation.min) +
                                      ") is above its max (" + format_number("%g", activation.max) +
                                      "), which oneDNN's post-ops refuse");
    try {
      build_node(index);
    } catch (const dnnl::error& error) {  // what oneDNN refuses that ipj does not foresee
      refuse(graph_.nodes[index], std::string("oneDNN refused it: ") + error.what());
    }
    for (const int slot : temporaries_)
      slots_.release(slot);
    temporaries_.clear();
    for (const std::size_t input : graph_.nodes[index].inputs) {  // values read for the last time
      const std::size_t owner = alias_of_[input];
      if (last_use[owner] == index && owner != last) slots_.release(values_[owner].slot);
    }
  }
  // The answer in plain layout, into the caller's tensor
  const memory::desc result = plain(dims_of(last));
  output_dims_ = result.dims();
  output_ = memory(result, engine_, DNNL_MEMORY_NONE);
  push_step(runtime_reorder(value_memory(last), output_),
            {{DNNL_ARG_FROM, value_memory(last)}, {DNNL_ARG_TO, output_}});
  for (const std::size_t bytes : slots_.sizes())
    buffers_.push_back(
        torch::empty({static_cast<std::int64_t>(std::max<std::size_t>(bytes, 64))}, torch::kUInt8));
  for (auto& [object, slot] : bindings_)
    object.set_data_handle(buffers_[slot].data_ptr(), stream_);
  stream_.wait();
  bindings_.clear();
}

// An add of a convolution's result (no activation of its own, read by nothing else) and a value whose last
// reader is the add and whose buffer's other readers (through flattens too) all run before the convolution:
// the convolution writes onto that value's buffer with the add (and its activation) as post-ops, and the add
// runs no primitive. The values share one buffer, which lives as long as the add's value.
void OnednnRuntime::plan_residual_fusions(const std::vector<std::vector<std::size_t> >& consumers,
                                          std::vector<std::size_t>& last_use) {
  residual_.assign(graph_.nodes.size(), ResidualSum{});
  fused_add_.assign(graph_.nodes.size(), 0);
  // Who reads each buffer: a flatten's linear readers read its producer's (a hostile pass found a linear
  // layer that ran after the convolution reading the sum instead of the value it flattened)
  std::vector<std::vector<std::size_t> > buffer_readers(graph_.nodes.size());
  for (std::size_t reader = 1; reader < graph_.nodes.size(); ++reader)
    for (const std::size_t input : graph_.nodes[reader].inputs)
      buffer_readers[alias_of_[input]].push_back(reader);
  for (std::size_t add = 1; add < graph_.nodes.size(); ++add) {
    const GraphNode& node = graph_.nodes[add];
    if (node.kind != NodeKind::add || node.inputs.size() != 2 || node.inputs[0] == node.inputs[1]) continue;
    for (int side = 0; side < 2; ++side) {
      const std::size_t conv = node.inputs[side], other = node.inputs[1 - side];
      const GraphNode& producer = graph_.nodes[conv];
      const bool conv_only_for_add = producer.kind == NodeKind::conv2d &&
                                     producer.activation.kind == quant::ActivationKind::none &&
                                     consumers[conv] == std::vector<std::size_t>{add};
      const bool other_free = other != 0 && other < conv && alias_of_[other] == other &&
                              residual_[other].add == 0 && last_use[other] == add &&
                              std::all_of(buffer_readers[other].begin(), buffer_readers[other].end(),
                                          [&](std::size_t reader) { return reader == add || reader < conv; });
      if (!conv_only_for_add || !other_free) continue;
      residual_[conv] = {add, other};
      fused_add_[add] = conv + 1;
      last_use[other] = last_use[conv] = last_use[add];
      break;
    }
  }
}

void OnednnRuntime::build_node(std::size_t index) {
  const GraphNode& node = graph_.nodes[index];
  switch (node.kind) {
    case NodeKind::conv2d:
      return add_convolution(index);
    case NodeKind::linear:
      return add_linear(index);
    case NodeKind::add:
      return add_add(index);
    case NodeKind::clamp:
      return add_clamp(index);
    case NodeKind::max_pool2d:
    case NodeKind::avg_pool2d:
    case NodeKind::adaptive_avg_pool2d:
      return add_pool(index);
    case NodeKind::flatten:
      return add_flatten(index);
    case NodeKind::input:
      refuse(node, "a second input");
  }
}

void OnednnRuntime::add_convolution(std::size_t index) {
  const GraphNode& node = graph_.nodes[index];
  const Dims source = dims_of(node.inputs.at(0));  // [B, C, H, W]
  if (source.size() != 4) refuse(node, "a convolution of a flat input");
  const ConvolutionGeometry geometry = convolution_geometry(node, source);
  const memory::desc stored_as = values_[node.inputs[0]].desc;
  // On the graph's plain input (few channels) oneDNN's direct kernels for that layout beat a reorder to one
  // it prefers (measured: the cnn's first convolution 0.33 ms vs 1.3 ms for its NHWC kernel at batch 64)
  ConvolutionRecipe recipe{node.inputs[0] == 0 ? stored_as : any(source), any(geometry.destination),
                           activation_attributes(node.activation)};
  dnnl::convolution_forward::primitive_desc primitive;
  const ResidualSum& residual = residual_[index];
  if (residual.add > 0) {  // the residual add onto the other operand's buffer, in its layout
    ConvolutionRecipe summed = recipe;
    summed.output = values_[residual.onto].desc;
    summed.attributes = sum_then(graph_.nodes[residual.add].activation);
    try {
      primitive = geometry.made(summed, engine_);
      if (!reference_kernel(primitive)) recipe = summed;
    } catch (const dnnl::error&) {  // no kernel for that layout with these post-ops
    }
    if (recipe.output != summed.output) unfuse_residual(index);  // the add runs alone
  }
  if (residual.add == 0) primitive = geometry.made(recipe, engine_);
  check_kernel(node, primitive);
  primitive = fastest_convolution(geometry, recipe, primitive, stored_as, node.inputs[0] == 0);
  const memory::desc given(geometry.weights, kFloat, node.groups == 1 ? Tag::oihw : Tag::goihw);
  const memory weight_memory = constant(node.weight, given, primitive.weights_desc());
  const memory bias_memory = constant(node.bias, geometry.bias, geometry.bias);
  const memory input = read_as(node.inputs[0], primitive.src_desc());
  if (residual.add > 0) values_[index] = values_[residual.onto];
  const memory output = residual.add > 0 ? value_memory(index) : output_of(index, primitive.dst_desc());
  push_weighted_step<dnnl::convolution_forward>(index, primitive, input, weight_memory, bias_memory, output);
}

// `chosen` or a faster alternative, timed from the layout its input is stored in (a reorder counted), the
// candidates in turn, five rounds after a warm-up (two where the warm-up took over 50 ms), each one's fastest
// call compared (a few ms per convolution at load): the same kernel family reading that layout as it is, and
// oneDNN's Winograd kernel where the shape allows (measured 12-07, batch 64: 0.78 vs 1.06 ms on the cnn's
// second convolution, 14x14; 0.40 vs 0.52 at 7x7; but 1.38 vs 1.18 at 2x2 and 5.5 vs 0.5 at 1x1, hence timed,
// not assumed).
dnnl::convolution_forward::primitive_desc OnednnRuntime::fastest_convolution(
    const ConvolutionGeometry& geometry, const ConvolutionRecipe& recipe,
    const dnnl::convolution_forward::primitive_desc& chosen, const memory::desc& stored_as,
    bool on_graph_input) {
  std::vector<ConvolutionRecipe> alternatives;
  if (!on_graph_input && chosen.src_desc() != stored_as) {
    alternatives.push_back(recipe);
    alternatives.back().source = stored_as;
  }
  if (geometry.winograd_shape && convolutions_ != OnednnConvolutionKernel::direct) {
    alternatives.push_back(recipe);
    alternatives.back().source = any(geometry.source);
    alternatives.back().algorithm = dnnl::algorithm::convolution_winograd;
  }
  std::vector<dnnl::convolution_forward::primitive_desc> candidates{chosen};
  for (const ConvolutionRecipe& alternative : alternatives) {
    try {
      const dnnl::convolution_forward::primitive_desc candidate = geometry.made(alternative, engine_);
      if (reference_kernel(candidate)) continue;
      const bool winograd = alternative.algorithm == dnnl::algorithm::convolution_winograd;
      if (winograd && convolutions_ == OnednnConvolutionKernel::winograd) return candidate;
      candidates.push_back(candidate);
    } catch (const dnnl::error&) {  // no kernel for it here (Winograd: not AVX-512, or these post-ops)
    }
  }
  if (candidates.size() == 1) return chosen;
  std::vector<ConvolutionTrial> trials;
  for (const auto& candidate : candidates)
    trials.emplace_back(candidate, stored_as, engine_);
  std::vector<double> fastest(candidates.size(), INFINITY);
  double warm_up_ms = 0.0;
  for (const ConvolutionTrial& trial : trials)
    warm_up_ms += trial.run(stream_);
  // Large convolutions (a 224x224 image at batch 64: tens of ms each) get two rounds: load time stays bounded
  const int rounds = warm_up_ms > 50.0 ? 2 : 5;
  for (int round = 0; round < rounds; ++round)
    for (std::size_t index = 0; index < trials.size(); ++index)
      fastest[index] = std::min(fastest[index], trials[index].run(stream_));
  return candidates[std::min_element(fastest.begin(), fastest.end()) - fastest.begin()];
}

void OnednnRuntime::add_linear(std::size_t index) {
  const GraphNode& node = graph_.nodes[index];
  const std::size_t producer = alias_of_[node.inputs.at(0)];
  const Dims source = dims_of(producer);  // [B, F] or, through a flatten, [B, C, H, W]
  const std::int64_t out = node.weight.size(0);
  std::int64_t features = 1;
  for (std::size_t axis = 1; axis < source.size(); ++axis)
    features *= source[axis];
  const bool flattened = producer != node.inputs[0];
  if ((source.size() != 2 && !flattened) || features != node.weight.size(1))
    refuse(node, "a linear layer on " + shape_text(source) + " for weights [" + std::to_string(out) + ", " +
                     std::to_string(node.weight.size(1)) + "]");
  Dims weights{out};
  weights.insert(weights.end(), source.begin() + 1, source.end());  // [O, F] or [O, C, H, W]
  const memory::desc bias({out}, kFloat, Tag::x);
  // Through a flatten, the producer's own layout (its weights reordered to match once) saves reordering
  // the activations on every call (0.2 ms of the cnn's batch 64); a layout it has no kernel for: any
  const auto made = [&](const memory::desc& layout) {
    const dnnl::inner_product_forward::desc description(dnnl::prop_kind::forward_inference, layout,
                                                        any(weights), bias, any({source[0], out}));
    return dnnl::inner_product_forward::primitive_desc(description, activation_attributes(node.activation),
                                                       engine_);
  };
  dnnl::inner_product_forward::primitive_desc primitive;
  try {
    primitive = made(flattened ? values_[producer].desc : any(source));
    if (reference_kernel(primitive)) primitive = made(any(source));
  } catch (const dnnl::error&) {
    primitive = made(any(source));
  }
  check_kernel(node, primitive);
  const memory weight_memory = constant(node.weight, plain(weights), primitive.weights_desc());
  const memory bias_memory = constant(node.bias, bias, bias);
  const memory input = read_as(producer, primitive.src_desc());
  const memory output = output_of(index, primitive.dst_desc());
  push_weighted_step<dnnl::inner_product_forward>(index, primitive, input, weight_memory, bias_memory,
                                                  output);
}

void OnednnRuntime::add_add(std::size_t index) {
  const GraphNode& node = graph_.nodes[index];
  const std::size_t first = node.inputs.at(0), second = node.inputs.at(1);
  if (fused_add_[index] > 0) {  // its convolution wrote the sum
    values_[index] = values_[fused_add_[index] - 1];
    return;
  }
  if (dims_of(first) != dims_of(second)) refuse(node, "an add of two shapes (broadcasting)");
  const memory::desc layout = values_[first].desc;
  const dnnl::binary::desc description(dnnl::algorithm::binary_add, layout, layout, layout);
  const dnnl::binary::primitive_desc primitive(description, activation_attributes(node.activation), engine_);
  const memory left = value_memory(first), right = read_as(second, layout);
  const memory output = output_of(index, primitive.dst_desc());
  push_step(dnnl::binary(primitive),
            {{DNNL_ARG_SRC_0, left}, {DNNL_ARG_SRC_1, right}, {DNNL_ARG_DST, output}});
}

void OnednnRuntime::add_clamp(std::size_t index) {
  const GraphNode& node = graph_.nodes[index];
  const bool relu = node.activation.kind == quant::ActivationKind::relu;
  const memory::desc layout = values_[node.inputs.at(0)].desc;
  const dnnl::eltwise_forward::desc description(
      dnnl::prop_kind::forward_inference,
      relu ? dnnl::algorithm::eltwise_relu : dnnl::algorithm::eltwise_clip, layout,
      relu ? 0.f : static_cast<float>(node.activation.min),
      relu ? 0.f : static_cast<float>(node.activation.max));
  const dnnl::eltwise_forward::primitive_desc primitive(description, runtime_attributes(), engine_);
  const memory input = value_memory(node.inputs[0]);
  const memory output = output_of(index, primitive.dst_desc());
  push_step(dnnl::eltwise_forward(primitive), {{DNNL_ARG_SRC, input}, {DNNL_ARG_DST, output}});
}

void OnednnRuntime::add_pool(std::size_t index) {
  const GraphNode& node = graph_.nodes[index];
  const Dims source = dims_of(node.inputs.at(0));
  if (source.size() != 4) refuse(node, "a pool of a flat input");
  if (node.dilation != quant::Pair{1, 1}) refuse(node, "a dilated pool");
  Dims kernel{node.kernel[0], node.kernel[1]}, stride{node.stride[0], node.stride[1]};
  Dims padding{node.padding[0], node.padding[1]}, padding_right = padding, destination = source;
  if (node.kind == NodeKind::adaptive_avg_pool2d) {
    for (int axis = 0; axis < 2; ++axis) {
      if (source[2 + axis] % node.output_size[axis] != 0)
        refuse(node, "an adaptive pool whose output does not divide its input");
      kernel[axis] = stride[axis] = source[2 + axis] / node.output_size[axis];
      padding[axis] = padding_right[axis] = 0;
      destination[2 + axis] = node.output_size[axis];
    }
  } else {
    for (int axis = 0; axis < 2; ++axis) {  // PyTorch's output size, then the right padding that gives it
      const std::int64_t span = source[2 + axis] + 2 * padding[axis] - kernel[axis];
      std::int64_t size = (span + (node.ceil_mode ? stride[axis] - 1 : 0)) / stride[axis] + 1;
      if (node.ceil_mode && (size - 1) * stride[axis] >= source[2 + axis] + padding[axis]) --size;
      destination[2 + axis] = size;
      padding_right[axis] = std::max<std::int64_t>(
          0, (size - 1) * stride[axis] + kernel[axis] - source[2 + axis] - padding[axis]);
      if (node.kind == NodeKind::avg_pool2d && node.count_include_pad && padding_right[axis] > padding[axis])
        refuse(node, "an average pool counting padding in ceil mode");
    }
  }
  destination[1] = source[1];
  const dnnl::algorithm algorithm = node.kind == NodeKind::max_pool2d ? dnnl::algorithm::pooling_max
                                    : node.kind == NodeKind::avg_pool2d && node.count_include_pad
                                        ? dnnl::algorithm::pooling_avg_include_padding
                                        : dnnl::algorithm::pooling_avg_exclude_padding;
  const memory::desc layout = values_[node.inputs[0]].desc;
  const dnnl::pooling_forward::desc description(dnnl::prop_kind::forward_inference, algorithm, layout,
                                                any(destination), stride, kernel, padding, padding_right);
  const dnnl::pooling_forward::primitive_desc primitive(description, runtime_attributes(), engine_);
  check_kernel(node, primitive);
  const memory input = value_memory(node.inputs[0]);
  const memory output = output_of(index, primitive.dst_desc());
  push_step(dnnl::pooling_forward(primitive), {{DNNL_ARG_SRC, input}, {DNNL_ARG_DST, output}});
}

// A flatten something other than linear layers reads: the value in plain layout, seen as [B, C*H*W].
void OnednnRuntime::add_flatten(std::size_t index) {
  if (alias_of_[index] != index) return;  // its linear readers read the producer
  const std::size_t producer = graph_.nodes[index].inputs.at(0);
  const Dims source = dims_of(producer);
  std::int64_t features = 1;
  for (std::size_t axis = 1; axis < source.size(); ++axis)
    features *= source[axis];
  const memory::desc flat = plain({source[0], features});
  const memory output = output_of(index, flat);
  const memory dense = bound(plain(source), values_[index].slot);
  push_step(runtime_reorder(value_memory(producer), dense),
            {{DNNL_ARG_FROM, value_memory(producer)}, {DNNL_ARG_TO, dense}});
  (void)output;
}

}  // namespace onednn_graph

bool onednn_runtime_available() {
  return true;
}

std::shared_ptr<InferenceModel> onednn_runtime_model(const quant::Graph& graph, std::int64_t batch,
                                                     int threads, OnednnConvolutionKernel convolutions,
                                                     std::shared_ptr<const InferenceModel> busy) {
  if (batch < 1 || threads < 1) fail(ErrorCategory::usage, "oneDNN runtime: batch and threads must be >= 1");
  if (graph.nodes.size() < 2) fail(ErrorCategory::unsupported, "oneDNN runtime: an empty graph");
  try {
    return std::make_shared<onednn_graph::OnednnRuntime>(graph, batch, threads, convolutions,
                                                         std::move(busy));
  } catch (const dnnl::error& error) {
    fail(ErrorCategory::unsupported, std::string("oneDNN runtime: ") + error.what());
  }
}

std::vector<OnednnNodeKernel> onednn_runtime_kernels(const InferenceModel& model) {
  const auto* runtime = dynamic_cast<const onednn_graph::OnednnRuntime*>(&model);
  return runtime ? runtime->kernels() : std::vector<OnednnNodeKernel>{};
}

std::string onednn_winograd_note(const InferenceModel& model) {
  int convolutions = 0, winograd = 0;
  for (const OnednnNodeKernel& kernel : onednn_runtime_kernels(model)) {
    convolutions += kernel.convolution ? 1 : 0;
    winograd += kernel.kernel.find("wino") != std::string::npos ? 1 : 0;
  }
  if (winograd == 0) return "";
  return " (Winograd for " + std::to_string(winograd) + " of its " + std::to_string(convolutions) +
         " convolutions)";
}

#endif

}  // namespace ipj::infer
