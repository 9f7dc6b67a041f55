// The seeds' small models: `mlp` (784-512-512-10, seed 000) and `cnn` (2 conv + BN + pool + 2 FC, the
// ~0.92-0.93 class of the Fashion-MNIST benchmark table). Parameter names match the PyTorch reference
// scripts.
#pragma once

#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "ipj/models/classifier.hpp"

namespace ipj::models {

// fc1: flat -> 512, ReLU, fc2: 512 -> 512, ReLU, fc3: 512 -> classes.
class Mlp : public Classifier {
 public:
  Mlp(InputShape input, int num_classes, int hidden = 512);
  torch::Tensor forward(torch::Tensor x) override;

 private:
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};

// conv1 3x3 (C -> 32) + bn1 + ReLU + maxpool2, conv2 3x3 (32 -> 64) + bn2 + ReLU + maxpool2,
// fc1 (64 * H/4 * W/4 -> 128) + ReLU, fc2 (128 -> classes). Convolutions have no bias (BN follows).
class SmallCnn : public Classifier {
 public:
  SmallCnn(InputShape input, int num_classes);
  torch::Tensor forward(torch::Tensor x) override;

 private:
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

}  // namespace ipj::models
