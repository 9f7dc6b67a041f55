// An ipj model as a straight line of layers with BatchNorm folded into the convolution before it and the
// input normalisation folded into the first layer: what the observers, QAT, pruning and the int8 kernels
// walk. Covers ipj's sequential models (mlp, cnn); residual models (resnet*) are refused with a clear error.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ipj/core/json_io.hpp"
#include "ipj/models/classifier.hpp"

namespace ipj::quant {

enum class LayerKind { linear, conv2d, max_pool2d, flatten };
std::string layer_kind_name(LayerKind kind);

struct Layer {
  LayerKind kind = LayerKind::linear;
  torch::Tensor weight;  // linear: [out, in]; conv2d: [out, in, kh, kw]; float32
  torch::Tensor bias;    // [out], float32
  bool relu = false;     // a ReLU fused after the layer
  std::int64_t stride = 1;
  std::int64_t padding = 0;
  std::int64_t pool = 2;  // max_pool2d: kernel = stride
};

struct LayerProgram {
  std::string model_name;                 // "mlp", "cnn", or "<name>-pruned"
  std::vector<std::int64_t> input_shape;  // [C, H, W]
  int num_classes = 10;
  // The first convolution's zero padding happens in normalised space, i.e. pixel value = mean: with the
  // normalisation folded into its weights the input is padded with the per-channel mean instead.
  std::int64_t input_padding = 0;
  std::vector<float> input_pad_value;  // per channel, pixel units [0, 1]
  std::vector<Layer> layers;
};

// Builds the program of a trained ipj model. `model_info` is the checkpoint's {"name", "input_shape",
// "num_classes", "mean", "std"}. Throws ipj::Error(unsupported) for models that are not a straight line.
LayerProgram extract_program(models::Classifier& model, const Json& model_info);

// Observer callback: (index of the layer, its output) for every weighted layer, after the fused ReLU.
using LayerObserver = std::function<void(std::size_t, const torch::Tensor&)>;

// Float forward. pixels: [B, C, H, W] in [0, 1] -> logits [B, classes]. No autograd unless the weights need
// it.
torch::Tensor run_float(const LayerProgram& program, const torch::Tensor& pixels,
                        const LayerObserver& observe = nullptr);

// Pads the raw pixels for the first convolution (see input_padding); identity when input_padding == 0.
torch::Tensor pad_input(const LayerProgram& program, const torch::Tensor& pixels);

// Linear and conv2d layers: the ones with a weight and a bias.
bool has_weights(const Layer& layer);

// Bytes of the float32 weights and biases.
std::int64_t float_parameter_bytes(const LayerProgram& program);
// Multiply-accumulates per sample (linear and conv layers).
std::int64_t multiply_accumulates(const LayerProgram& program);

}  // namespace ipj::quant
