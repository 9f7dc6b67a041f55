// Private to the infer module: the pieces of the oneDNN runtime (onednn_runtime.cpp) that are not the runtime
// itself: layouts, post-ops, the reference-kernel guard and the activation buffer planner. Included only
// where IPJ_WITH_ONEDNN is set (oneDNN 2.x API).
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "ipj/core/error.hpp"
#include "ipj/quant/graph.hpp"

namespace ipj::infer::onednn_graph {

using dnnl::memory;
using Dims = memory::dims;
using Tag = memory::format_tag;
using quant::GraphNode;
using quant::NodeKind;
constexpr auto kFloat = memory::data_type::f32;

[[noreturn]] inline void refuse(const GraphNode& node, const std::string& why) {
  fail(ErrorCategory::unsupported,
       "oneDNN runtime: node '" + node.name + "' (" + quant::node_kind_name(node.kind) + "): " + why);
}

// oneDNN's reference kernels for convolutions, inner products and pools (its fallback where no optimised
// one fits: measured 100-200x slower on the cnn's first convolution with an NHWC output) must not run: such
// a node is refused like an operator. Element-wise ones (clamp, add) may: a loop over memory either way.
inline bool reference_kernel(const dnnl::primitive_desc_base& primitive) {
  return std::string(primitive.impl_info_str()).rfind("ref", 0) == 0;
}

inline void check_kernel(const GraphNode& node, const dnnl::primitive_desc_base& primitive) {
  if (reference_kernel(primitive))
    refuse(node, std::string("oneDNN has only its reference kernel (") + primitive.impl_info_str() +
                     ") for it here");
}

inline memory::desc plain(const Dims& dims) {
  return memory::desc(dims, kFloat, dims.size() == 4 ? Tag::nchw : Tag::nc);
}

inline memory::desc any(const Dims& dims) {
  return memory::desc(dims, kFloat, Tag::any);
}

// Attributes every primitive of the runtime starts from: its scratchpad comes from the runtime (a buffer it
// binds, DNNL_ARG_SCRATCHPAD), not from oneDNN's library-managed one, which oneDNN 2.x keeps per thread and
// allocates on the thread that made the primitive: run on another thread (a server's batcher), a primitive
// with a scratchpad (Winograd's convolutions, some direct ones) wrote through a null pointer.
inline dnnl::primitive_attr runtime_attributes() {
  dnnl::primitive_attr attributes;
  attributes.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attributes;
}

// The scratchpad `primitive` needs (a zero-size desc: none).
inline memory::desc scratchpad_of(const dnnl::primitive& primitive) {
  const dnnl_memory_desc_t* desc =
      dnnl_primitive_desc_query_md(primitive.get_primitive_desc(), dnnl_query_scratchpad_md, 0);
  return desc ? memory::desc(*desc) : memory::desc();
}

// `source` reordered into `target`'s layout, scratchpad from the runtime.
inline dnnl::reorder runtime_reorder(const memory& source, const memory& target) {
  return dnnl::reorder(dnnl::reorder::primitive_desc(source, target, runtime_attributes()));
}

// A node's fused activation appended as a post-op (none: nothing).
inline void append_activation(dnnl::post_ops& post_ops, const quant::Activation& activation) {
  if (activation.kind == quant::ActivationKind::relu)
    post_ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
  if (activation.kind == quant::ActivationKind::clamp)
    post_ops.append_eltwise(1.f, dnnl::algorithm::eltwise_clip, static_cast<float>(activation.min),
                            static_cast<float>(activation.max));
}

// The node's fused activation as a post-op.
inline dnnl::primitive_attr activation_attributes(const quant::Activation& activation) {
  dnnl::post_ops post_ops;
  append_activation(post_ops, activation);
  dnnl::primitive_attr attributes = runtime_attributes();
  attributes.set_post_ops(post_ops);
  return attributes;
}

// oneDNN's sum post-op (dst += the convolution's result), then the add's activation.
inline dnnl::primitive_attr sum_then(const quant::Activation& activation) {
  dnnl::post_ops post_ops;
  post_ops.append_sum(1.f);
  append_activation(post_ops, activation);
  dnnl::primitive_attr attributes = runtime_attributes();
  attributes.set_post_ops(post_ops);
  return attributes;
}

// One way to run a convolution node: the layouts oneDNN is asked for, its post-ops and its algorithm (direct,
// or Winograd F(4x4, 3x3), which oneDNN 2.x has for AVX-512 only).
struct ConvolutionRecipe {
  memory::desc source, output;
  dnnl::primitive_attr attributes;
  dnnl::algorithm algorithm = dnnl::algorithm::convolution_direct;
};

// A convolution node's fixed parts, [B, C, H, W] tensors, weights [O, I, KH, KW] or [G, O/G, I/G, KH, KW].
struct ConvolutionGeometry {
  Dims source, weights, destination;
  memory::desc bias;
  Dims strides, dilation, padding;  // dilation as oneDNN counts it: 0 is none
  bool winograd_shape = false;      // 3x3, stride 1, no dilation, one group

  dnnl::convolution_forward::primitive_desc made(const ConvolutionRecipe& recipe,
                                                 const dnnl::engine& engine) const {
    const dnnl::convolution_forward::desc description(dnnl::prop_kind::forward_inference, recipe.algorithm,
                                                      recipe.source, any(weights), bias, recipe.output,
                                                      strides, dilation, padding, padding);
    return dnnl::convolution_forward::primitive_desc(description, recipe.attributes, engine);
  }
};

inline ConvolutionGeometry convolution_geometry(const GraphNode& node, const Dims& source) {
  const std::int64_t out = node.weight.size(0), kh = node.weight.size(2), kw = node.weight.size(3);
  const auto extent = [&](std::int64_t size, int axis, std::int64_t kernel) {
    return (size + 2 * node.padding[axis] - node.dilation[axis] * (kernel - 1) - 1) / node.stride[axis] + 1;
  };
  ConvolutionGeometry geometry;
  geometry.source = source;
  geometry.destination = {source[0], out, extent(source[2], 0, kh), extent(source[3], 1, kw)};
  const std::int64_t groups = node.groups;
  geometry.weights =
      groups == 1 ? Dims{out, source[1], kh, kw} : Dims{groups, out / groups, source[1] / groups, kh, kw};
  geometry.bias = memory::desc({out}, kFloat, Tag::x);
  geometry.strides = {node.stride[0], node.stride[1]};
  geometry.dilation = {node.dilation[0] - 1, node.dilation[1] - 1};
  geometry.padding = {node.padding[0], node.padding[1]};
  geometry.winograd_shape =
      kh == 3 && kw == 3 && groups == 1 && geometry.strides == Dims{1, 1} && geometry.dilation == Dims{0, 0};
  return geometry;
}

// A convolution kernel on zeros stored as `stored_as` (reordered first where it wants another layout), on
// scratch buffers of its own: run() times one call, in ms.
class ConvolutionTrial {
 public:
  ConvolutionTrial(const dnnl::convolution_forward::primitive_desc& primitive, const memory::desc& stored_as,
                   const dnnl::engine& engine)
      : stored_(zeros(stored_as, engine)),
        input_(primitive.src_desc() == stored_as ? stored_ : zeros(primitive.src_desc(), engine)),
        reorder_(primitive.src_desc() == stored_as ? dnnl::reorder() : dnnl::reorder(stored_, input_)),
        convolution_(primitive),
        arguments_{{DNNL_ARG_SRC, input_},
                   {DNNL_ARG_WEIGHTS, zeros(primitive.weights_desc(), engine)},
                   {DNNL_ARG_BIAS, zeros(primitive.bias_desc(), engine)},
                   {DNNL_ARG_DST, zeros(primitive.dst_desc(), engine)}},
        reordered_(primitive.src_desc() != stored_as) {
    if (primitive.scratchpad_desc().get_size() > 0)
      arguments_.emplace(DNNL_ARG_SCRATCHPAD, zeros(primitive.scratchpad_desc(), engine));
  }

  double run(dnnl::stream& stream) const {
    const auto start = std::chrono::steady_clock::now();
    if (reordered_) reorder_.execute(stream, {{DNNL_ARG_FROM, stored_}, {DNNL_ARG_TO, input_}});
    convolution_.execute(stream, arguments_);
    stream.wait();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }

 private:
  static memory zeros(const memory::desc& desc, const dnnl::engine& engine) {
    memory object(desc, engine);
    std::memset(object.get_data_handle(), 0, desc.get_size());
    return object;
  }

  memory stored_, input_;
  dnnl::reorder reorder_;
  dnnl::convolution_forward convolution_;
  std::unordered_map<int, memory> arguments_;
  bool reordered_;
};

// Activation buffers: each value takes a slot while it lives; a slot freed goes to the next value that
// fits (the smallest such), else the largest free one grows.
class SlotPlanner {
 public:
  int take(std::size_t bytes) {
    int best = -1;
    for (int slot = 0; slot < static_cast<int>(sizes_.size()); ++slot) {
      if (!free_[slot]) continue;
      const bool fits = sizes_[slot] >= bytes, best_fits = best >= 0 && sizes_[best] >= bytes;
      if (best < 0 || (fits && (!best_fits || sizes_[slot] < sizes_[best])) ||
          (!fits && !best_fits && sizes_[slot] > sizes_[best]))
        best = slot;
    }
    if (best < 0) {
      sizes_.push_back(0);
      free_.push_back(true);
      best = static_cast<int>(sizes_.size()) - 1;
    }
    sizes_[best] = std::max(sizes_[best], bytes);
    free_[best] = false;
    return best;
  }
  // Slot `slot` (taken, never released) at least `bytes` large.
  void grow(int slot, std::size_t bytes) { sizes_.at(slot) = std::max(sizes_.at(slot), bytes); }
  void release(int slot) {
    if (slot >= 0) free_[slot] = true;
  }
  const std::vector<std::size_t>& sizes() const { return sizes_; }

 private:
  std::vector<std::size_t> sizes_;
  std::vector<bool> free_;
};

struct Step {
  dnnl::primitive primitive;
  std::unordered_map<int, memory> arguments;
};

struct Value {
  memory::desc desc;
  int slot = -1;  // -1: the prepared input (its handle set per call)
};

}  // namespace ipj::infer::onednn_graph
