// The model interface ipj trains and evaluates: an image classifier mapping [B, C, H, W] to logits [B,
// classes].
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <memory>
#include <string>

namespace ipj::models {

struct InputShape {
  int channels = 1;
  int height = 28;
  int width = 28;
  std::int64_t flat_size() const { return static_cast<std::int64_t>(channels) * height * width; }
};

class Classifier : public torch::nn::Module {
 public:
  // x: [B, C, H, W] float -> logits [B, num_classes]
  virtual torch::Tensor forward(torch::Tensor x) = 0;
};

using ClassifierPtr = std::shared_ptr<Classifier>;

}  // namespace ipj::models
