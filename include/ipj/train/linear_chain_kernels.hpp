// The elementwise passes of the linear-chain training step (linear_chain_step.cpp), each one pass over its
// rows instead of LibTorch's several operators: bias + ReLU, the ReLU mask with the bias gradient, softmax
// cross-entropy with its gradient, and SGD with momentum writing the bf16 weight copy. LibTorch-free,
// row ranges so that callers split them across threads; compiled for AVX-512, AVX2 and baseline x86-64.
#pragma once

#include <cstdint>

namespace ipj::train::chain_kernels {

// A bf16 value as its bits (the upper half of an fp32), the layout of c10::BFloat16.
using Bf16Bits = std::uint16_t;

// fp32 -> bf16 rounded to nearest even, as c10::BFloat16 (and torch's .to(torch.bfloat16)) rounds; NaN stays
// NaN. n values.
void to_bf16(const float* in, Bf16Bits* out, std::int64_t n);

// Rows [row_begin, row_end) of z [rows, cols] (a GEMM's output, row-major): z += bias[col], then
// max(z, 0) when `relu`. In place.
void add_bias_relu(float* z, const float* bias, std::int64_t cols, std::int64_t row_begin,
                   std::int64_t row_end, bool relu);
void add_bias_relu(Bf16Bits* z, const float* bias, std::int64_t cols, std::int64_t row_begin,
                   std::int64_t row_end, bool relu);

// Columns [col_begin, col_end) of da [rows, cols]: da = da where activation > 0 else 0 (ReLU's backward,
// `activation` being the ReLU's output), in place; bias_grad[col] = sum over rows of the new da (fp32 sums,
// rows in order).
void relu_backward_bias_grad(float* da, const float* activation, std::int64_t rows, std::int64_t cols,
                             std::int64_t col_begin, std::int64_t col_end, float* bias_grad);
void relu_backward_bias_grad(Bf16Bits* da, const Bf16Bits* activation, std::int64_t rows, std::int64_t cols,
                             std::int64_t col_begin, std::int64_t col_end, float* bias_grad);

// Mean softmax cross-entropy of logits [rows, classes] fp32 against labels [rows] (each in [0, classes)):
// returns the summed loss (divide by rows for the mean); writes d(mean loss)/d(logits) into grad [rows,
// classes] and its column sums into bias_grad [classes].
double softmax_cross_entropy(const float* logits, const std::int64_t* labels, std::int64_t rows,
                             std::int64_t classes, float* grad, float* bias_grad);

// One SGD-with-momentum update of n parameters, torch::optim::SGD's (dampening 0, no Nesterov): d = g +
// weight_decay * w; v = momentum * v + d; w -= lr * v (w -= lr * d when momentum is 0: v unused). Gradients
// fp32 or bf16; `weight_copy` (nullable) receives bf16(w) after the update, the copy the next step's bf16
// GEMMs read.
struct SgdSettings {
  float learning_rate = 0.0F;
  float momentum = 0.0F;
  float weight_decay = 0.0F;
};
void sgd_update(float* weight, float* velocity, const float* grad, std::int64_t n, SgdSettings settings,
                Bf16Bits* weight_copy);
void sgd_update(float* weight, float* velocity, const Bf16Bits* grad, std::int64_t n, SgdSettings settings,
                Bf16Bits* weight_copy);

}  // namespace ipj::train::chain_kernels
