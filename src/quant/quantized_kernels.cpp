// Dispatcher calls into LibTorch's quantized operators (see quantized_kernels.hpp).
#include "quantized_kernels.hpp"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/quantized/Quantizer.h>
#include <torch/torch.h>

#include "ipj/device/cpu_info.hpp"

namespace ipj::quant {

LinearPacked prepack_linear(const torch::Tensor& qweight, const torch::Tensor& bias) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("quantized::linear_prepack", "")
                       .typed<LinearPacked(at::Tensor, c10::optional<at::Tensor>)>();
  return op.call(qweight, bias);
}

ConvPacked prepack_conv(const torch::Tensor& qweight, const torch::Tensor& bias, const Pair& stride,
                        const Pair& padding, const Pair& dilation, std::int64_t groups) {
  static auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("quantized::conv2d_prepack", "")
          .typed<ConvPacked(at::Tensor, c10::optional<at::Tensor>, torch::List<std::int64_t>,
                            torch::List<std::int64_t>, torch::List<std::int64_t>, std::int64_t)>();
  return op.call(qweight, bias, torch::List<std::int64_t>({stride[0], stride[1]}),
                 torch::List<std::int64_t>({padding[0], padding[1]}),
                 torch::List<std::int64_t>({dilation[0], dilation[1]}), groups);
}

bool kernel_saturates(const std::string& engine) {
  static const bool has_vnni = device::onednn_int8_has_vnni(device::probe_cpu());
  return (engine == "onednn" || engine == "fbgemm") && !has_vnni;
}

torch::Tensor quantize_weight(const torch::Tensor& int8_values, const torch::Tensor& scales,
                              const std::string& engine) {
  const torch::Tensor zero_points = torch::zeros({scales.size(0)}, torch::kLong);
  if (!kernel_saturates(engine))
    return at::_make_per_channel_quantized_tensor(int8_values, scales, zero_points, 0);
  constexpr double kRatio = 127.0 / 63.0;
  const torch::Tensor seven_bit =
      torch::round(int8_values.to(torch::kFloat) / kRatio).clamp(-63, 63).to(torch::kChar);
  return at::_make_per_channel_quantized_tensor(seven_bit, scales * kRatio, zero_points, 0);
}

torch::Tensor quantized_add(const torch::Tensor& qa, const torch::Tensor& qb, const QuantParams& out,
                            bool relu) {
  using Signature = at::Tensor(at::Tensor, at::Tensor, double, std::int64_t);
  static auto add = c10::Dispatcher::singleton().findSchemaOrThrow("quantized::add", "").typed<Signature>();
  static auto add_relu =
      c10::Dispatcher::singleton().findSchemaOrThrow("quantized::add_relu", "").typed<Signature>();
  return relu ? add_relu.call(qa, qb, out.scale, out.zero_point)
              : add.call(qa, qb, out.scale, out.zero_point);
}

torch::Tensor with_zero_point_zero(const torch::Tensor& quantized) {
  torch::Tensor alias = at::alias(quantized);  // shares the storage, own quantizer
  at::set_quantizer_(alias,
                     at::make_per_tensor_affine_quantizer(quantized.q_scale(), 0, quantized.scalar_type()));
  return alias;
}

}  // namespace ipj::quant
