// Private to infer: the pieces of an XNNPACK int8 subgraph that int8 programs and int8 graphs share: qint8
// values with ipj's quint8 parameters (zero point - 128: the same real values), and convolutions / linear
// layers with channelwise int8 weights (linear layers as 1x1 convolutions on [N, 1, 1, F]: this XNNPACK's
// fully connected layer takes one weight scale only). Limits: built only with IPJ_WITH_XNNPACK.
#pragma once

#ifdef IPJ_WITH_XNNPACK

#include <torch/types.h>
#include <xnnpack.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ipj/quant/graph.hpp"
#include "ipj/quant/observer.hpp"
#include "ipj/quant/quantized_program.hpp"
#include "xnnpack_planned_runtime.hpp"

namespace ipj::infer::xnnpack {

struct Int8Subgraph {
  xnn_subgraph_t handle = nullptr;
  // Static data (weights, biases and their scales), alive until the runtime has packed its own copy.
  std::vector<torch::Tensor> weights;
};

// A value: its id, ATen shape ([N, C, H, W] or [N, F]; 2-D values are [N, 1, 1, F] in XNNPACK so that linear
// layers can be 1x1 convolutions), the [C, H, W] a flatten came from (elements in H, W, C order), and its
// int8 parameters (ipj's quint8 ones; unused for a float value).
struct Int8Value {
  std::uint32_t id = XNN_INVALID_VALUE_ID;
  Shape aten_shape;
  Shape flattened_chw;
  quant::QuantParams params;
};

// Throws ipj::Error(unsupported) "XNNPACK int8 runtime: <where> refused by XNNPACK's <what> (status N)".
void check_int8(xnn_status status, const std::string& where, const char* what);
// XNNPACK dims of a value: 4-D in NHWC, 2-D [N, F] as [N, 1, 1, F].
std::vector<std::size_t> int8_dims(const Shape& aten_shape);
// An internal qint8 value of `aten_shape` with ipj's quint8 parameters.
std::uint32_t define_int8_value(Int8Subgraph& subgraph, const Shape& aten_shape,
                                const quant::QuantParams& params, const std::string& where);

// External value 0 (fp32 of `aten_shape`) quantized to a new qint8 value with `params`.
Int8Value define_int8_input(Int8Subgraph& subgraph, const Shape& aten_shape,
                            const quant::QuantParams& params);
// External value 1 (fp32) as `value` (qint8) dequantized.
void define_dequantized_output(Int8Subgraph& subgraph, const Int8Value& value);

// A convolution (weight int8 [O, I/groups, kh, kw]) or linear layer (weight [O, I]; on a flattened value
// its columns are permuted to XNNPACK's H, W, C order), per-channel double scales [O], float bias [O]
// (rounded to int32 at input scale x weight scale), output clamped to [low, high] in real units.
struct Int8Convolution {
  torch::Tensor weight, scales, bias;
  quant::Pair stride{1, 1}, dilation{1, 1};
  std::int64_t pad_top = 0, pad_right = 0, pad_bottom = 0, pad_left = 0;
  std::int64_t groups = 1;
  float low = -INFINITY, high = INFINITY;
};
void define_int8_convolution(Int8Subgraph& subgraph, const Int8Convolution& convolution,
                             const Int8Value& input, const Int8Value& output, const std::string& where);

// An int8 runtime on the calling thread (threads 1) or a pthreadpool of `threads` whose workers sleep between
// calls: refuses (ipj::Error(unsupported)) when XNNPACK does not initialise
// or `mode` is dynamic (its scales change per batch), else creates a subgraph, lets `define` fill it and
// return the ATen shapes of external values 0 and 1, and makes the runtime (the subgraph is deleted whatever
// happens), its input written by `write` where that takes it (else `prepare`).
std::shared_ptr<InferenceModel> int8_runtime_model(
    quant::QuantMode mode, const std::function<std::pair<Shape, Shape>(Int8Subgraph&)>& define,
    std::vector<std::int64_t> sample_shape, PrepareInput prepare, std::shared_ptr<const InferenceModel> busy,
    int threads, WriteInput write = {});

}  // namespace ipj::infer::xnnpack

#endif
