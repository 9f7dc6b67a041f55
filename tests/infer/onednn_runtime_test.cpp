// oneDNN's runtime of the graph IR: every node kind against the graph interpreter (ATen) at two batch sizes
// and thread counts, PyTorch's own outputs for torchvision's ResNet-18 and MobileNetV2, the shape guard and
// refusals that name the node.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "infer/graph_ir_fixture.hpp"
#include "ipj/core/error.hpp"
#include "ipj/infer/onednn_runtime.hpp"
#include "quant/graph_models_fixture.hpp"

namespace ipj::infer {
namespace {

using namespace graph_fixture;

TEST(OnednnRuntime, RunsEveryNodeKindAsTheGraphInterpreterDoes) {
  if (!onednn_runtime_available()) GTEST_SKIP() << "built without oneDNN (libdnnl-dev)";
  const Graph graph = every_kind_graph();
  expect_runtime_answers_as_interpreter(
      graph, [&](std::int64_t batch, int threads) { return onednn_runtime_model(graph, batch, threads); });
  torch::NoGradGuard no_grad;
  // A 4-D output comes back as [N, C, H, W]; a flatten read by an add is made dense.
  Graph convolutional = graph;
  convolutional.nodes.resize(10);
  const torch::Tensor pixels = torch::rand({2, 3, 11, 11});
  const torch::Tensor output = onednn_runtime_model(convolutional, 2, 1)->forward(pixels);
  EXPECT_EQ(output.sizes(), (std::vector<std::int64_t>{2, 8, 3, 3}));
  EXPECT_LT(relative_difference(output, quant::run_graph(convolutional, pixels)), 1e-5);
  Graph flat_sum = convolutional;
  flat_sum.nodes.push_back(layer(NodeKind::flatten, "flat", {9}));
  flat_sum.nodes.push_back(layer(NodeKind::flatten, "flat2", {7}));
  flat_sum.nodes.push_back(layer(NodeKind::add, "sum", {10, 11}));
  EXPECT_LT(relative_difference(onednn_runtime_model(flat_sum, 2, 2)->forward(pixels),
                                quant::run_graph(flat_sum, pixels)),
            1e-5);
}

// PyTorch's own outputs (golden, from torch 1.13 in Python) for the imported torchvision models, batch 64.
TEST(OnednnRuntime, AnswersAsPyTorchOnTorchvisionModels) {
  if (!onednn_runtime_available()) GTEST_SKIP() << "built without oneDNN (libdnnl-dev)";
  const testing::GraphModels& models = testing::graph_models();
  const torch::Tensor pixels = models.tensor("input");  // [64, 1, 28, 28]
  for (const std::string model : {"resnet18", "mobilenet_v2", "residual"}) {
    const Graph graph = quant::import_torchscript_file(models.file(model + "_scripted.pt"),
                                                       testing::graph_model_import_options(model));
    const auto runtime = onednn_runtime_model(graph, pixels.size(0), 2);
    torch::NoGradGuard no_grad;
    EXPECT_LT(relative_difference(runtime->forward(pixels), models.tensor(model)), 1e-4) << model;
  }
}

TEST(OnednnRuntime, RefusesOtherShapesAndNamesTheNodeItCannotTake) {
  if (!onednn_runtime_available()) GTEST_SKIP() << "built without oneDNN (libdnnl-dev)";
  const Graph graph = every_kind_graph();
  const auto runtime = onednn_runtime_model(graph, 2, 1);
  try {
    runtime->forward(torch::rand({3, 3, 11, 11}));
    ADD_FAILURE() << "a batch of 3 ran on a runtime for 2";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::invalid_input);
    EXPECT_NE(std::string(error.what()).find("[2, 3, 11, 11]"), std::string::npos) << error.what();
  }
  Graph uneven = graph;
  uneven.nodes[10].output_size = {4, 4};  // 6x6 into 4x4: windows of two sizes
  try {
    onednn_runtime_model(uneven, 2, 1);
    ADD_FAILURE() << "an uneven adaptive pool was taken";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::unsupported);
    EXPECT_NE(std::string(error.what()).find("node 'adaptive'"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace ipj::infer
