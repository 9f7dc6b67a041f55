// Private to the train module: the linear-chain step's GEMMs as oneDNN matmul primitives of their own
// (Debian's libdnnl, the library LibTorch's bf16 kernels already run on), created once per layer, kind and
// batch size: the forward with its bias and ReLU fused, weight gradients written in fp32. Operands bf16 or
// fp32. Without oneDNN in the build (IPJ_WITH_ONEDNN unset) or without a native matmul of that type on this
// CPU, create() returns null and the step keeps ATen's GEMMs. Row-major buffers throughout; bf16 as its 16
// bits.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace ipj::train {

class OnednnChainGemms {
 public:
  // The type of the inputs, weights and activations (weight gradients and biases are fp32 either way).
  enum class Element { bf16, fp32 };

  virtual ~OnednnChainGemms() = default;
  // Null when oneDNN is not built in or has only its reference matmul for `element` here.
  static std::unique_ptr<OnednnChainGemms> create(Element element);

  // oneDNN's implementation of this matmul here, e.g. "brg:avx512_core" or "gemm:jit".
  virtual const std::string& implementation() const = 0;

  // One layer's shapes (the primitives' cache key with the batch's rows).
  struct Layer {
    std::size_t index = 0;
    std::int64_t in = 0;
    std::int64_t out = 0;
  };
  // output [rows, out] = input [rows, in] weight[out, in]^T + bias [out], then ReLU when `relu`; input,
  // weight and output of the element type, the output fp32 when `fp32_output` (the logits).
  virtual void forward(Layer layer, std::int64_t rows, const void* input, const void* weight,
                       const float* bias, void* output, bool relu, bool fp32_output) = 0;
  // weight_grad [out, in] fp32 = output_grad [rows, out]^T input [rows, in] (operands of the element type).
  virtual void weight_grad(Layer layer, std::int64_t rows, const void* output_grad, const void* input,
                           float* weight_grad) = 0;
  // input_grad [rows, in] = output_grad [rows, out] weight [out, in] (all of the element type).
  virtual void input_grad(Layer layer, std::int64_t rows, const void* output_grad, const void* weight,
                          void* input_grad) = 0;
};

}  // namespace ipj::train
