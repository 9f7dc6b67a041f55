// MLP and small CNN definitions.
#include "ipj/models/simple_models.hpp"

#include <torch/torch.h>

#include "ipj/core/error.hpp"

namespace ipj::models {

Mlp::Mlp(InputShape input, int num_classes, int hidden) {
  fc1 = register_module("fc1", torch::nn::Linear(input.flat_size(), hidden));
  fc2 = register_module("fc2", torch::nn::Linear(hidden, hidden));
  fc3 = register_module("fc3", torch::nn::Linear(hidden, num_classes));
}

torch::Tensor Mlp::forward(torch::Tensor x) {
  x = x.flatten(1);                  // [B, C*H*W]
  x = torch::relu(fc1->forward(x));  // [B, 512]
  x = torch::relu(fc2->forward(x));  // [B, 512]
  return fc3->forward(x);            // [B, classes]
}

SmallCnn::SmallCnn(InputShape input, int num_classes) {
  if (input.height < 4 || input.width < 4)
    fail(ErrorCategory::usage, "model cnn needs images of at least 4x4 pixels");
  conv1 = register_module(
      "conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(input.channels, 32, 3).padding(1).bias(false)));
  bn1 = register_module("bn1", torch::nn::BatchNorm2d(32));
  conv2 =
      register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).padding(1).bias(false)));
  bn2 = register_module("bn2", torch::nn::BatchNorm2d(64));
  const std::int64_t pooled = static_cast<std::int64_t>(input.height / 4) * (input.width / 4);
  fc1 = register_module("fc1", torch::nn::Linear(64 * pooled, 128));
  fc2 = register_module("fc2", torch::nn::Linear(128, num_classes));
}

torch::Tensor SmallCnn::forward(torch::Tensor x) {
  x = torch::max_pool2d(torch::relu(bn1->forward(conv1->forward(x))), 2);  // [B, 32, H/2, W/2]
  x = torch::max_pool2d(torch::relu(bn2->forward(conv2->forward(x))), 2);  // [B, 64, H/4, W/4]
  x = torch::relu(fc1->forward(x.flatten(1)));                             // [B, 128]
  return fc2->forward(x);                                                  // [B, classes]
}

}  // namespace ipj::models
