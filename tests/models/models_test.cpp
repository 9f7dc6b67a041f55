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

// The catalog's rows agree with themselves: a layer program is the graph of its model, each kind of user file
// has exactly one template row to borrow recipe defaults from, and the recipe and search defaults are usable.
// (tests/quant/catalog_test.cpp checks the capabilities against the code that serves them.)
TEST(Models, CatalogCapabilitiesAreConsistent) {
  for (const bool convolutional : {false, true}) {
    int templates = 0;
    for (const auto& entry : model_catalog())
      templates += entry.file_template && entry.convolutional == convolutional;
    EXPECT_EQ(templates, 1) << "convolutional " << convolutional;
    EXPECT_EQ(file_template_entry(convolutional).convolutional, convolutional);
  }
  EXPECT_EQ(file_template_entry(false).name, "mlp");
  EXPECT_EQ(file_template_entry(true).name, "cnn");
  for (const auto& entry : model_catalog()) {
    SCOPED_TRACE(entry.name);
    EXPECT_EQ(&model_entry(entry.name), &entry);
    EXPECT_EQ(find_model_entry(entry.name), &entry);
    EXPECT_EQ(has_layer_program(entry.name), entry.has_layer_program());
    EXPECT_EQ(entry.graph == GraphBuilder::from_layer_program, entry.has_layer_program());
    if (entry.python_seed_loop) {
      EXPECT_TRUE(entry.has_layer_program());  // the seeds' models are mlp/cnn-like
    }
    EXPECT_GT(entry.compare.target_acc, 0.0);
    EXPECT_LT(entry.compare.target_acc, 1.0);
    EXPECT_GT(entry.compare.baseline_max_epochs, 0);
    EXPECT_GT(entry.compare.optimized_epochs, 0);
    EXPECT_GT(entry.compare.optimized_batch, 0);
    EXPECT_GT(entry.compare.optimized_lr, 0.0);
    for (const std::int64_t value : entry.tune.batches)
      EXPECT_GT(value, 0);
    for (const std::int64_t value : entry.tune.epochs)
      EXPECT_GT(value, 0);
  }
  EXPECT_EQ(find_model_entry("vgg"), nullptr);
  EXPECT_FALSE(has_layer_program("vgg"));
  EXPECT_EQ(model_names_where([](const ModelEntry& entry) { return entry.has_layer_program(); }),
            "mlp and cnn");
  EXPECT_EQ(model_names_where([](const ModelEntry& entry) { return entry.has_graph(); }),
            "mlp, cnn, resnet18 and resnet50");
  EXPECT_EQ(model_names_where([](const ModelEntry&) { return false; }), "none");
}

}  // namespace ipj::models
