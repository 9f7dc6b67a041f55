// Private to the quant module: LibTorch's quantized kernels as ipj calls them. Prepacking goes through the
// dispatcher (quantized::linear_prepack / conv2d_prepack), execution through the packed params' virtual
// apply methods; quantized::add(_relu) for residual adds; zero-point reinterpretation for oneDNN.
#pragma once

#include <ATen/native/quantized/PackedParams.h>
#include <torch/types.h>

#include <cstdint>

#include "ipj/quant/graph.hpp"
#include "ipj/quant/observer.hpp"

namespace ipj::quant {

using LinearPacked = c10::intrusive_ptr<LinearPackedParamsBase>;
using ConvPacked = c10::intrusive_ptr<ConvPackedParamsBase<2>>;

LinearPacked prepack_linear(const torch::Tensor& qweight, const torch::Tensor& bias);
ConvPacked prepack_conv(const torch::Tensor& qweight, const torch::Tensor& bias, const Pair& stride,
                        const Pair& padding, const Pair& dilation, std::int64_t groups);
// Per-output-channel qint8 tensor (zero points 0) from int8 values [out, ...] and double scales [out].
torch::Tensor quantize_weight(const torch::Tensor& int8_values, const torch::Tensor& scales);
// qa + qb (then relu) requantized to `out`.
torch::Tensor quantized_add(const torch::Tensor& qa, const torch::Tensor& qb, const QuantParams& out, bool relu);
// The same uint8 storage read with zero point 0, i.e. real value + scale * zero_point (no copy).
torch::Tensor with_zero_point_zero(const torch::Tensor& quantized);

}  // namespace ipj::quant
