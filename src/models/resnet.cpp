// ResNet blocks (basic and bottleneck) and the small-image ResNet-18/50.
#include "ipj/models/resnet.hpp"

#include <torch/torch.h>

namespace ipj::models {
namespace {

torch::nn::Conv2d conv(std::int64_t in, std::int64_t out, std::int64_t kernel, std::int64_t stride) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

// Projection shortcut (1x1 conv + BN) when shape changes; empty Sequential means identity.
torch::nn::Sequential make_shortcut(std::int64_t in, std::int64_t out, std::int64_t stride) {
  torch::nn::Sequential shortcut;
  if (stride != 1 || in != out) {
    shortcut->push_back(conv(in, out, 1, stride));
    shortcut->push_back(torch::nn::BatchNorm2d(out));
  }
  return shortcut;
}

class BasicBlockImpl : public torch::nn::Module {
 public:
  static constexpr std::int64_t kExpansion = 1;
  BasicBlockImpl(std::int64_t in, std::int64_t planes, std::int64_t stride)
      : conv1(register_module("conv1", conv(in, planes, 3, stride))),
        bn1(register_module("bn1", torch::nn::BatchNorm2d(planes))),
        conv2(register_module("conv2", conv(planes, planes, 3, 1))),
        bn2(register_module("bn2", torch::nn::BatchNorm2d(planes))),
        shortcut(register_module("shortcut", make_shortcut(in, planes, stride))) {}

  torch::Tensor forward(torch::Tensor x) {  // x: [B, in, H, W] -> [B, planes, H/stride, W/stride]
    torch::Tensor out = torch::relu(bn1->forward(conv1->forward(x)));
    out = bn2->forward(conv2->forward(out));
    return torch::relu(out + (shortcut->is_empty() ? x : shortcut->forward(x)));
  }

  torch::nn::Conv2d conv1;
  torch::nn::BatchNorm2d bn1;
  torch::nn::Conv2d conv2;
  torch::nn::BatchNorm2d bn2;
  torch::nn::Sequential shortcut;
};
TORCH_MODULE(BasicBlock);

class BottleneckImpl : public torch::nn::Module {
 public:
  static constexpr std::int64_t kExpansion = 4;
  BottleneckImpl(std::int64_t in, std::int64_t planes, std::int64_t stride)
      : conv1(register_module("conv1", conv(in, planes, 1, 1))),
        bn1(register_module("bn1", torch::nn::BatchNorm2d(planes))),
        conv2(register_module("conv2", conv(planes, planes, 3, stride))),
        bn2(register_module("bn2", torch::nn::BatchNorm2d(planes))),
        conv3(register_module("conv3", conv(planes, planes * kExpansion, 1, 1))),
        bn3(register_module("bn3", torch::nn::BatchNorm2d(planes * kExpansion))),
        shortcut(register_module("shortcut", make_shortcut(in, planes * kExpansion, stride))) {}

  torch::Tensor forward(torch::Tensor x) {  // x: [B, in, H, W] -> [B, 4*planes, H/stride, W/stride]
    torch::Tensor out = torch::relu(bn1->forward(conv1->forward(x)));
    out = torch::relu(bn2->forward(conv2->forward(out)));
    out = bn3->forward(conv3->forward(out));
    return torch::relu(out + (shortcut->is_empty() ? x : shortcut->forward(x)));
  }

  torch::nn::Conv2d conv1;
  torch::nn::BatchNorm2d bn1;
  torch::nn::Conv2d conv2;
  torch::nn::BatchNorm2d bn2;
  torch::nn::Conv2d conv3;
  torch::nn::BatchNorm2d bn3;
  torch::nn::Sequential shortcut;
};
TORCH_MODULE(Bottleneck);

}  // namespace

ResNet::ResNet(InputShape input, int num_classes, std::vector<int> blocks_per_stage, bool bottleneck) {
  stem_conv = register_module("stem_conv", conv(input.channels, 64, 3, 1));
  stem_bn = register_module("stem_bn", torch::nn::BatchNorm2d(64));
  const std::int64_t expansion = bottleneck ? BottleneckImpl::kExpansion : BasicBlockImpl::kExpansion;
  std::int64_t channels = 64;
  const std::int64_t stage_planes[4] = {64, 128, 256, 512};
  for (size_t stage = 0; stage < blocks_per_stage.size() && stage < 4; ++stage) {
    torch::nn::Sequential blocks;
    for (int block = 0; block < blocks_per_stage[stage]; ++block) {
      const std::int64_t stride = (stage > 0 && block == 0) ? 2 : 1;
      if (bottleneck) {
        blocks->push_back(Bottleneck(channels, stage_planes[stage], stride));
      } else {
        blocks->push_back(BasicBlock(channels, stage_planes[stage], stride));
      }
      channels = stage_planes[stage] * expansion;
    }
    stages_.push_back(register_module("layer" + std::to_string(stage + 1), blocks));
  }
  fc = register_module("fc", torch::nn::Linear(channels, num_classes));
}

torch::Tensor ResNet::forward(torch::Tensor x) {
  x = torch::relu(stem_bn->forward(stem_conv->forward(x)));  // [B, 64, H, W]
  for (auto& stage : stages_)
    x = stage->forward(x);                               // [B, 512*expansion, H/8, W/8]
  x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);  // [B, 512*expansion]
  return fc->forward(x);                                 // [B, classes]
}

ClassifierPtr make_resnet18(InputShape input, int num_classes) {
  return std::make_shared<ResNet>(input, num_classes, std::vector<int>{2, 2, 2, 2}, false);
}

ClassifierPtr make_resnet50(InputShape input, int num_classes) {
  return std::make_shared<ResNet>(input, num_classes, std::vector<int>{3, 4, 6, 3}, true);
}

}  // namespace ipj::models
