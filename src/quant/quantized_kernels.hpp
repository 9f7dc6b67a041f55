// Private to the quant module: LibTorch's quantized kernels as ipj calls them. Prepacking goes through the
// dispatcher (quantized::linear_prepack / conv2d_prepack), execution through the packed params' virtual
// apply methods; quantized::add(_relu) for residual adds; zero-point reinterpretation for oneDNN. Without
// VNNI, x86 int8 kernels (oneDNN, FBGEMM) multiply u8 x s8 pairs into saturating 16-bit sums (vpmaddubsw):
// the weights are then packed in 7 bits.
#pragma once

#include <ATen/native/quantized/PackedParams.h>
#include <torch/types.h>

#include <cstdint>
#include <string>

#include "ipj/quant/graph.hpp"
#include "ipj/quant/observer.hpp"

namespace ipj::quant {

using LinearPacked = c10::intrusive_ptr<LinearPackedParamsBase>;
using ConvPacked = c10::intrusive_ptr<ConvPackedParamsBase<2>>;

LinearPacked prepack_linear(const torch::Tensor& qweight, const torch::Tensor& bias);
ConvPacked prepack_conv(const torch::Tensor& qweight, const torch::Tensor& bias, const Pair& stride,
                        const Pair& padding, const Pair& dilation, std::int64_t groups);
// Per-output-channel qint8 tensor (zero points 0) from int8 values [out, ...] and double scales [out], as
// the engine's kernels can use it: requantized to [-63, 63] (scales * 127 / 63) where kernel_saturates.
torch::Tensor quantize_weight(const torch::Tensor& int8_values, const torch::Tensor& scales,
                              const std::string& engine);
// True for oneDNN and FBGEMM on CPUs without VNNI (AVX-512 VNNI or AMX-INT8), or with oneDNN capped below
// it (ONEDNN_MAX_CPU_ISA, device/cpu_info.hpp): measured on an AVX2 EPYC, full-range weights gave errors
// of 11-18 output quanta, 7-bit weights 0.5.
bool kernel_saturates(const std::string& engine);
// qa + qb (then relu) requantized to `out`.
torch::Tensor quantized_add(const torch::Tensor& qa, const torch::Tensor& qb, const QuantParams& out,
                            bool relu);
// The same uint8 storage read with zero point 0, i.e. real value + scale * zero_point (no copy).
torch::Tensor with_zero_point_zero(const torch::Tensor& quantized);

}  // namespace ipj::quant
