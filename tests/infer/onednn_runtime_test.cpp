// oneDNN's runtime of the graph IR: every node kind against the graph interpreter (ATen) at two batch sizes
// and thread counts, Winograd's kernels forced, off and timed, PyTorch's own outputs for torchvision's
// ResNet-18 and MobileNetV2, the shape guard and refusals that name the node.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <thread>
#include <tuple>
#include <vector>

#include "infer/graph_ir_fixture.hpp"
#include "ipj/core/error.hpp"
#include "ipj/device/cpu_info.hpp"
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

// A value read by an add fused into a convolution and, through a flatten, by a linear layer that runs after
// that convolution: the linear layer must read the value, not the sum written over its buffer (a hostile
// pass, 12-07: 0.095-0.16 relative off, caught only by the load's check against eager).
TEST(OnednnRuntime, AFusedAddNeverOverwritesAValueAFlattenStillReads) {
  if (!onednn_runtime_available()) GTEST_SKIP() << "built without oneDNN (libdnnl-dev)";
  torch::manual_seed(5);
  Graph graph;
  graph.input_shape = {3, 8, 8};
  graph.nodes.push_back(layer(NodeKind::input, "input", {}));
  graph.nodes.push_back(relu_conv("c0", 0, 3, 8, 3));                // 1: p
  graph.nodes.push_back(layer(NodeKind::flatten, "flat_p", {1}));    // 2
  graph.nodes.push_back(relu_conv("c1", 1, 8, 8, 3));                // 3
  graph.nodes.push_back(conv("c2", 3, 8, 8, 3));                     // 4: added onto p's buffer
  graph.nodes.push_back(linear("l", 2, 8 * 8 * 8, 10));              // 5: reads p after c2
  graph.nodes.push_back(layer(NodeKind::add, "sum", {4, 1}));        // 6
  graph.nodes.push_back(layer(NodeKind::flatten, "flat_sum", {6}));  // 7
  graph.nodes.push_back(linear("l2", 7, 8 * 8 * 8, 10));             // 8
  graph.nodes.push_back(layer(NodeKind::add, "out", {8, 5}));        // 9
  quant::validate_graph(graph, "test");
  torch::NoGradGuard no_grad;
  const torch::Tensor pixels = torch::rand({4, 3, 8, 8});
  EXPECT_LT(relative_difference(onednn_runtime_model(graph, 4, 2)->forward(pixels),
                                quant::run_graph(graph, pixels)),
            1e-5);
}

// oneDNN's Winograd kernels (3x3, stride 1; AVX-512 only): forced wherever oneDNN has one, they answer as
// the interpreter, the residual add fused into one included, and kernels() names them; `direct` runs none;
// the default (each convolution timed both ways at load) answers the same whichever it keeps.
TEST(OnednnRuntime, WinogradConvolutionsAnswerAsTheInterpreterAndAreNamed) {
  if (!onednn_runtime_available()) GTEST_SKIP() << "built without oneDNN (libdnnl-dev)";
  torch::manual_seed(11);
  Graph graph;
  graph.input_shape = {16, 12, 12};
  graph.nodes.push_back(layer(NodeKind::input, "input", {}));
  for (const auto& [name, input, in] :
       {std::tuple<const char*, std::size_t, std::int64_t>{"c1", 0, 16}, {"c2", 1, 32}}) {
    GraphNode node = conv(name, input, in, 32, 3);  // 1, 2
    node.activation.kind = ActivationKind::relu;
    graph.nodes.push_back(node);
  }
  graph.nodes.push_back(conv("c3", 2, 32, 32, 3));  // 3: its add onto c1's value fused into it
  GraphNode sum = layer(NodeKind::add, "sum", {3, 1});
  sum.activation.kind = ActivationKind::relu;
  graph.nodes.push_back(sum);                                             // 4
  graph.nodes.push_back(pool(NodeKind::max_pool2d, "pool", 4, 2, 2, 0));  // 5: [32, 6, 6]
  graph.nodes.push_back(layer(NodeKind::flatten, "flat", {5}));           // 6
  graph.nodes.push_back(linear("fc", 6, 32 * 6 * 6, 10));                 // 7
  quant::validate_graph(graph, "test");
  torch::NoGradGuard no_grad;
  const torch::Tensor pixels = torch::rand({4, 16, 12, 12});
  const torch::Tensor expected = quant::run_graph(graph, pixels);
  const device::CpuInfo cpu = device::probe_cpu();
  const bool avx512 = cpu.has("avx512bw") && !cpu.onednn_cap;
  for (const OnednnConvolutionKernel kernels :
       {OnednnConvolutionKernel::direct, OnednnConvolutionKernel::winograd, OnednnConvolutionKernel::timed}) {
    const auto runtime = onednn_runtime_model(graph, 4, 2, kernels);
    EXPECT_LT(relative_difference(runtime->forward(pixels), expected), 1e-4);
    const std::vector<OnednnNodeKernel> named = onednn_runtime_kernels(*runtime);
    ASSERT_EQ(named.size(), 4u);
    int winograd = 0;
    for (std::size_t index = 0; index < named.size(); ++index) {
      EXPECT_EQ(named[index].node, std::vector<std::string>({"c1", "c2", "c3", "fc"})[index]);
      EXPECT_EQ(named[index].convolution, index < 3);
      winograd += named[index].kernel.find("wino") != std::string::npos ? 1 : 0;
    }
    const std::string note = onednn_winograd_note(*runtime);
    if (kernels == OnednnConvolutionKernel::direct) {
      EXPECT_EQ(winograd, 0);
    }
    if (kernels == OnednnConvolutionKernel::winograd) {
      EXPECT_EQ(winograd >= 2, avx512) << winograd;
    }
    EXPECT_EQ(note.empty(), winograd == 0) << note;
    if (winograd > 0) {
      EXPECT_EQ(note, " (Winograd for " + std::to_string(winograd) + " of its 3 convolutions)");
    }
  }
}

// A runtime built on one thread and called from another (a server's batcher thread), Winograd forced: the
// answers as the interpreter's (oneDNN 2.6's Winograd kernel wrote to address 0 on a thread other than its
// creator's: ipj serve crashed on its first such batch).
TEST(OnednnRuntime, WinogradRuntimeAnswersOnAThreadOtherThanItsCreators) {
  if (!onednn_runtime_available()) GTEST_SKIP() << "built without oneDNN (libdnnl-dev)";
  torch::manual_seed(17);
  Graph graph;
  graph.input_shape = {3, 32, 32};
  graph.nodes.push_back(layer(NodeKind::input, "input", {}));
  graph.nodes.push_back(relu_conv("c1", 0, 3, 32, 3));
  graph.nodes.push_back(relu_conv("c2", 1, 32, 64, 3));
  quant::validate_graph(graph, "test");
  torch::NoGradGuard no_grad;
  const torch::Tensor pixels = torch::rand({8, 3, 32, 32});
  const torch::Tensor expected = quant::run_graph(graph, pixels);
  for (const int threads : {1, 2}) {
    const auto runtime = onednn_runtime_model(graph, 8, threads, OnednnConvolutionKernel::winograd);
    double difference = INFINITY;
    std::thread caller([&] {
      torch::NoGradGuard caller_no_grad;
      for (int call = 0; call < 3; ++call)
        difference = relative_difference(runtime->forward(pixels), expected);
    });
    caller.join();
    EXPECT_LT(difference, 1e-4) << threads << " thread(s)";
  }
}

// Winograd forced on 3x3 stride-1 convolutions oneDNN may or may not take (odd channel counts, no or wide
// padding, a batch of 3): each runs on some kernel and answers as the interpreter.
TEST(OnednnRuntime, WinogradForcedOnOddConvolutionsStillAnswersAsTheInterpreter) {
  if (!onednn_runtime_available()) GTEST_SKIP() << "built without oneDNN (libdnnl-dev)";
  torch::manual_seed(13);
  torch::NoGradGuard no_grad;
  for (const auto& [in, out, padding] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{5, 7, 0},
                                         {16, 16, 2},
                                         {16, 48, 1},
                                         {1, 16, 1}}) {
    Graph graph;
    graph.input_shape = {in, 9, 9};
    graph.nodes.push_back(layer(NodeKind::input, "input", {}));
    GraphNode node = conv("c", 0, in, out, 3);
    node.padding = {padding, padding};
    node.activation.kind = ActivationKind::relu;
    graph.nodes.push_back(node);
    quant::validate_graph(graph, "test");
    const torch::Tensor pixels = torch::rand({3, in, 9, 9});
    const auto runtime = onednn_runtime_model(graph, 3, 2, OnednnConvolutionKernel::winograd);
    EXPECT_LT(relative_difference(runtime->forward(pixels), quant::run_graph(graph, pixels)), 1e-4)
        << in << " -> " << out << ", padding " << padding << ": "
        << onednn_runtime_kernels(*runtime)[0].kernel;
  }
}

// One runtime, four threads: each caller gets its own input's answer, whether it waited for the runtime or
// ran on the busy fallback (batch 1 on the calling thread, as the fp32 route uses it).
TEST(OnednnRuntime, ConcurrentCallersEachGetTheirOwnAnswer) {
  if (!onednn_runtime_available()) GTEST_SKIP() << "built without oneDNN (libdnnl-dev)";
  const Graph graph = every_kind_graph();
  expect_concurrent_callers_get_their_own_answers(graph, [&](std::shared_ptr<const InferenceModel> busy) {
    return onednn_runtime_model(graph, 1, 1, OnednnConvolutionKernel::timed, std::move(busy));
  });
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
  // A clamp whose min is above its max (oneDNN's post-ops refuse it) is named by node, with its bounds
  Graph inverted = graph;
  inverted.nodes[2].activation = {ActivationKind::clamp, 6.0, 0.0};
  try {
    onednn_runtime_model(inverted, 2, 1);
    ADD_FAILURE() << "an inverted clamp was taken";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::unsupported);
    EXPECT_NE(std::string(error.what())
                  .find("node 'depthwise' (conv2d): a clamp whose min (6) is above its max (0)"),
              std::string::npos)
        << error.what();
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
