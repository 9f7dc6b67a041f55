// Model registry: output shapes, exact parameter counts (matching the published architectures), exact FLOPs.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "ipj/core/error.hpp"
#include "ipj/models/flop_counter.hpp"
#include "ipj/models/registry.hpp"

namespace ipj::models {

TEST(Models, OutputShapesForMnistAndCifarInputs) {
  for (const auto& entry : model_catalog()) {
    for (const InputShape shape : {InputShape{1, 28, 28}, InputShape{3, 32, 32}}) {
      auto model = create_model(entry.name, shape, 10);
      model->eval();
      torch::NoGradGuard no_grad;
      const auto logits = model->forward(torch::randn({2, shape.channels, shape.height, shape.width}));
      EXPECT_EQ(logits.sizes(), (std::vector<std::int64_t>{2, 10})) << entry.name;
    }
  }
}

TEST(Models, ParameterCounts) {
  // mlp: 784*512+512 + 512*512+512 + 512*10+10
  EXPECT_EQ(count_parameters(*create_model("mlp", {1, 28, 28}, 10)), 669706);
  // cnn: conv 1*32*9 + bn 64 + conv 32*64*9 + bn 128 + fc 3136*128+128 + fc 128*10+10
  EXPECT_EQ(count_parameters(*create_model("cnn", {1, 28, 28}, 10)), 421738);
  // The CIFAR ResNets (3x3 stem): the widely reported 11,173,962 and 23,520,842 parameters.
  EXPECT_EQ(count_parameters(*create_model("resnet18", {3, 32, 32}, 10)), 11173962);
  EXPECT_EQ(count_parameters(*create_model("resnet50", {3, 32, 32}, 10)), 23520842);
}

TEST(Models, ForwardFlopsAreExact) {
  auto count = [](const std::string& name) {
    auto model = create_model(name, {1, 28, 28}, 10);
    model->eval();
    torch::NoGradGuard no_grad;
    return count_flops([&] { model->forward(torch::zeros({1, 1, 28, 28})); });
  };
  EXPECT_EQ(count("mlp"), 2 * (784 * 512 + 512 * 512 + 512 * 10));
  EXPECT_EQ(count("cnn"), 2 * (28 * 28 * 32 * 9 + 14 * 14 * 64 * 32 * 9 + 3136 * 128 + 128 * 10));
}

TEST(Models, FlopCounterScalesWithBatchAndStopsAfterward) {
  auto model = create_model("mlp", {1, 28, 28}, 10);
  torch::NoGradGuard no_grad;
  const auto one = count_flops([&] { model->forward(torch::zeros({1, 1, 28, 28})); });
  const auto four = count_flops([&] { model->forward(torch::zeros({4, 1, 28, 28})); });
  EXPECT_EQ(four, 4 * one);
  EXPECT_EQ(count_flops([] {}), 0);
}

TEST(Models, UnknownNameListsKnownModels) {
  try {
    create_model("vgg", {1, 28, 28}, 10);
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::usage);
    EXPECT_NE(std::string(error.what()).find("resnet18"), std::string::npos);
  }
}

}  // namespace ipj::models
