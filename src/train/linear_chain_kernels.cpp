// The linear-chain step's elementwise passes (see the header). Each public function is compiled three times
// (AVX-512BW, AVX2, baseline x86-64) and the loader picks the CPU's best at start-up (GCC/Clang
// target_clones); the loops are written for the compiler to vectorise, with bf16 rounding in integer ops.
#include "ipj/train/linear_chain_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(IPJ_NO_TARGET_CLONES)
#define IPJ_KERNEL_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define IPJ_KERNEL_CLONES
#endif
#define IPJ_INLINE inline __attribute__((always_inline))

namespace ipj::train::chain_kernels {
namespace {

IPJ_INLINE float to_float(float value) {
  return value;
}
IPJ_INLINE float to_float(Bf16Bits bits) {
  const std::uint32_t word = static_cast<std::uint32_t>(bits) << 16U;
  float value;
  std::memcpy(&value, &word, sizeof value);
  return value;
}

// c10::BFloat16's round_to_nearest_even: NaN -> 0x7FC0, else add 0x7FFF plus the kept part's lowest bit.
IPJ_INLINE Bf16Bits bf16_of(float value) {
  std::uint32_t word;
  std::memcpy(&word, &value, sizeof word);
  const std::uint32_t rounded = (word + 0x7FFFU + ((word >> 16U) & 1U)) >> 16U;
  return (word & 0x7FFFFFFFU) > 0x7F800000U ? Bf16Bits{0x7FC0} : static_cast<Bf16Bits>(rounded);
}

IPJ_INLINE void store(float* out, float value) {
  *out = value;
}
IPJ_INLINE void store(Bf16Bits* out, float value) {
  *out = bf16_of(value);
}

template <typename Value>
IPJ_INLINE void add_bias_relu_rows(Value* z, const float* bias, std::int64_t cols, std::int64_t row_begin,
                                   std::int64_t row_end, bool relu) {
  const float floor = relu ? 0.0F : -std::numeric_limits<float>::infinity();
  for (std::int64_t row = row_begin; row < row_end; ++row) {
    Value* line = z + row * cols;
    for (std::int64_t col = 0; col < cols; ++col)
      store(line + col, std::max(to_float(line[col]) + bias[col], floor));
  }
}

template <typename Value>
IPJ_INLINE void relu_backward_columns(Value* da, const Value* activation, std::int64_t rows,
                                      std::int64_t cols, std::int64_t col_begin, std::int64_t col_end,
                                      float* bias_grad) {
  std::fill(bias_grad + col_begin, bias_grad + col_end, 0.0F);
  const Value zero{};
  for (std::int64_t row = 0; row < rows; ++row) {
    Value* grad_line = da + row * cols;
    const Value* active_line = activation + row * cols;
    for (std::int64_t col = col_begin; col < col_end; ++col) {
      const Value kept = to_float(active_line[col]) > 0.0F ? grad_line[col] : zero;
      grad_line[col] = kept;
      bias_grad[col] += to_float(kept);
    }
  }
}

template <typename Grad>
IPJ_INLINE void sgd_values(float* weight, float* velocity, const Grad* grad, std::int64_t n,
                           SgdSettings settings, Bf16Bits* weight_copy) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float step = to_float(grad[i]) + settings.weight_decay * weight[i];
    float direction = step;
    if (settings.momentum != 0.0F) {
      direction = settings.momentum * velocity[i] + step;
      velocity[i] = direction;
    }
    weight[i] -= settings.learning_rate * direction;
    if (weight_copy != nullptr) weight_copy[i] = bf16_of(weight[i]);
  }
}

}  // namespace

IPJ_KERNEL_CLONES void to_bf16(const float* in, Bf16Bits* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i)
    out[i] = bf16_of(in[i]);
}

IPJ_KERNEL_CLONES void add_bias_relu(float* z, const float* bias, std::int64_t cols, std::int64_t row_begin,
                                     std::int64_t row_end, bool relu) {
  add_bias_relu_rows(z, bias, cols, row_begin, row_end, relu);
}

IPJ_KERNEL_CLONES void add_bias_relu(Bf16Bits* z, const float* bias, std::int64_t cols,
                                     std::int64_t row_begin, std::int64_t row_end, bool relu) {
  add_bias_relu_rows(z, bias, cols, row_begin, row_end, relu);
}

IPJ_KERNEL_CLONES void relu_backward_bias_grad(float* da, const float* activation, std::int64_t rows,
                                               std::int64_t cols, std::int64_t col_begin,
                                               std::int64_t col_end, float* bias_grad) {
  relu_backward_columns(da, activation, rows, cols, col_begin, col_end, bias_grad);
}

IPJ_KERNEL_CLONES void relu_backward_bias_grad(Bf16Bits* da, const Bf16Bits* activation, std::int64_t rows,
                                               std::int64_t cols, std::int64_t col_begin,
                                               std::int64_t col_end, float* bias_grad) {
  relu_backward_columns(da, activation, rows, cols, col_begin, col_end, bias_grad);
}

double softmax_cross_entropy(const float* logits, const std::int64_t* labels, std::int64_t rows,
                             std::int64_t classes, float* grad, float* bias_grad) {
  std::fill(bias_grad, bias_grad + classes, 0.0F);
  const float inverse_rows = 1.0F / static_cast<float>(rows);
  double loss_sum = 0.0;
  for (std::int64_t row = 0; row < rows; ++row) {
    const float* line = logits + row * classes;
    float* grad_line = grad + row * classes;
    const float top = *std::max_element(line, line + classes);
    float exp_sum = 0.0F;
    for (std::int64_t c = 0; c < classes; ++c) {
      grad_line[c] = std::exp(line[c] - top);
      exp_sum += grad_line[c];
    }
    const std::int64_t label = labels[row];
    loss_sum += static_cast<double>(std::log(exp_sum) + top - line[label]);
    const float scale = inverse_rows / exp_sum;
    for (std::int64_t c = 0; c < classes; ++c) {
      grad_line[c] = grad_line[c] * scale - (c == label ? inverse_rows : 0.0F);
      bias_grad[c] += grad_line[c];
    }
  }
  return loss_sum;
}

IPJ_KERNEL_CLONES void sgd_update(float* weight, float* velocity, const float* grad, std::int64_t n,
                                  SgdSettings settings, Bf16Bits* weight_copy) {
  sgd_values(weight, velocity, grad, n, settings, weight_copy);
}

IPJ_KERNEL_CLONES void sgd_update(float* weight, float* velocity, const Bf16Bits* grad, std::int64_t n,
                                  SgdSettings settings, Bf16Bits* weight_copy) {
  sgd_values(weight, velocity, grad, n, settings, weight_copy);
}

}  // namespace ipj::train::chain_kernels
