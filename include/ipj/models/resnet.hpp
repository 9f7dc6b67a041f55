// ResNet-18/50 adapted to small images (28x28 / 32x32, the CIFAR variant of He et al.): a 3x3 stride-1 stem
// without max-pool, four stages (64, 128, 256, 512 channels; strides 1, 2, 2, 2), global average pool, FC.
#pragma once

#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <vector>

#include "ipj/models/classifier.hpp"

namespace ipj::models {

class ResNet : public Classifier {
 public:
  // bottleneck=false: BasicBlock (expansion 1); true: Bottleneck (expansion 4).
  ResNet(InputShape input, int num_classes, std::vector<int> blocks_per_stage, bool bottleneck);
  torch::Tensor forward(torch::Tensor x) override;

 private:
  torch::nn::Conv2d stem_conv{nullptr};
  torch::nn::BatchNorm2d stem_bn{nullptr};
  std::vector<torch::nn::Sequential> stages_;
  torch::nn::Linear fc{nullptr};
};

ClassifierPtr make_resnet18(InputShape input, int num_classes);
ClassifierPtr make_resnet50(InputShape input, int num_classes);

}  // namespace ipj::models
