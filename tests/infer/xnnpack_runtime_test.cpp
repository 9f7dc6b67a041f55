// XNNPACK's subgraph runtime of the graph IR: PyTorch's own outputs for torchvision's ResNet-18 and
// MobileNetV2 (make_graph_models.py), every node kind against the graph interpreter (ATen), refusals that
// name the node, the input shape guard, concurrent callers, and a batch's rows split across one-thread
// runtimes (the same answers, one call counted, a slice's error on the caller).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <thread>

#include "infer/graph_ir_fixture.hpp"
#include "ipj/core/error.hpp"
#include "ipj/infer/xnnpack_runtime.hpp"
#include "ipj/quant/graph.hpp"
#include "quant/graph_models_fixture.hpp"

namespace ipj::infer {
namespace {

using quant::ActivationKind;
using quant::Graph;
using quant::GraphNode;
using quant::NodeKind;
using namespace graph_fixture;

TEST(XnnpackRuntime, RunsEveryNodeKindAsTheGraphInterpreterDoes) {
  if (!xnnpack_runtime_available()) GTEST_SKIP() << "built without XNNPACK (libxnnpack-dev)";
  const Graph graph = every_kind_graph();
  quant::validate_graph(graph, "test");
  // (The weights the runtime was made from are freed: it packed its own copy.)
  expect_runtime_answers_as_interpreter(
      graph, [&](std::int64_t batch, int threads) { return xnnpack_runtime_model(graph, batch, threads); });
  torch::NoGradGuard no_grad;
  // The output of the graph's last node need not be [N, F]: a 4-D output comes back as [N, C, H, W].
  Graph convolutional = graph;
  convolutional.nodes.resize(10);
  const torch::Tensor pixels = torch::rand({2, 3, 11, 11});
  const torch::Tensor output = xnnpack_runtime_model(convolutional, 2, 1)->forward(pixels);
  EXPECT_EQ(output.sizes(), (std::vector<std::int64_t>{2, 8, 3, 3}));
  EXPECT_LT(relative_difference(output, quant::run_graph(convolutional, pixels)), 1e-5);
  // A node nobody reads is left out (XNNPACK gives its value no memory and asserts when it runs).
  Graph dead_branch = convolutional;
  dead_branch.nodes.insert(dead_branch.nodes.begin() + 9, conv("unused", 8, 8, 4, 1));
  const torch::Tensor with_dead = xnnpack_runtime_model(dead_branch, 2, 1)->forward(pixels);
  EXPECT_LT(relative_difference(with_dead, quant::run_graph(dead_branch, pixels)), 1e-5);
}

// Convolutions on inputs so small that some kernel taps only ever see zero padding (ResNet-18's last stage
// on 28x28 images) run with those taps cut: the same answers as ATen at every such geometry.
TEST(XnnpackRuntime, CutsKernelTapsThatOnlySeePaddingAndAnswersTheSame) {
  if (!xnnpack_runtime_available()) GTEST_SKIP() << "built without XNNPACK (libxnnpack-dev)";
  torch::manual_seed(12);
  struct Geometry {
    std::int64_t height, width, kernel, stride, padding, dilation;
  };
  for (const Geometry& geometry : std::vector<Geometry>{{1, 1, 3, 1, 1, 1},
                                                        {2, 2, 3, 2, 1, 1},
                                                        {1, 5, 3, 1, 1, 1},
                                                        {3, 3, 3, 1, 2, 2},
                                                        {2, 3, 5, 1, 2, 1},
                                                        {1, 1, 5, 1, 2, 1},
                                                        {4, 4, 3, 3, 1, 1}}) {
    Graph graph;
    graph.input_shape = {4, geometry.height, geometry.width};
    graph.nodes.push_back(layer(NodeKind::input, "input", {}));
    GraphNode small = conv("small", 0, 4, 6, geometry.kernel);
    small.stride = {geometry.stride, geometry.stride};
    small.padding = {geometry.padding, geometry.padding};
    small.dilation = {geometry.dilation, geometry.dilation};
    graph.nodes.push_back(small);
    graph.nodes.push_back(layer(NodeKind::flatten, "flatten", {1}));
    const std::int64_t features =
        quant::run_graph(graph, torch::zeros({1, 4, geometry.height, geometry.width})).size(1);
    graph.nodes.push_back(linear("fc", 2, features, 3));
    torch::NoGradGuard no_grad;
    const torch::Tensor pixels = torch::rand({2, 4, geometry.height, geometry.width});
    EXPECT_LT(relative_difference(xnnpack_runtime_model(graph, 2, 1)->forward(pixels),
                                  quant::run_graph(graph, pixels)),
              1e-5)
        << geometry.height << "x" << geometry.width << " k" << geometry.kernel << " s" << geometry.stride
        << " p" << geometry.padding << " d" << geometry.dilation;
  }
}

// PyTorch's own outputs (golden, from torch 1.13 in Python) for the imported torchvision models, batch 64.
TEST(XnnpackRuntime, AnswersAsPyTorchOnTorchvisionModels) {
  if (!xnnpack_runtime_available()) GTEST_SKIP() << "built without XNNPACK (libxnnpack-dev)";
  const testing::GraphModels& models = testing::graph_models();
  const torch::Tensor pixels = models.tensor("input");  // [64, 1, 28, 28]
  for (const std::string model : {"resnet18", "mobilenet_v2", "residual"}) {
    const Graph graph = quant::import_torchscript_file(models.file(model + "_scripted.pt"),
                                                       testing::graph_model_import_options(model));
    const auto runtime = xnnpack_runtime_model(graph, pixels.size(0), 2);
    torch::NoGradGuard no_grad;
    EXPECT_LT(relative_difference(runtime->forward(pixels), models.tensor(model)), 1e-4) << model;
  }
}

void expect_refused(const Graph& graph, ErrorCategory category, const std::string& words) {
  try {
    xnnpack_runtime_model(graph, 1, 1);
    ADD_FAILURE() << "built: " << words;
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), category);
    EXPECT_NE(std::string(error.what()).find(words), std::string::npos) << error.what();
  }
}

TEST(XnnpackRuntime, RefusesWhatItCannotRunAndNamesTheNode) {
  if (!xnnpack_runtime_available()) GTEST_SKIP() << "built without XNNPACK (libxnnpack-dev)";
  Graph padded = every_kind_graph();
  padded.nodes[8].count_include_pad = true;  // XNNPACK's average pools leave padding out
  expect_refused(padded, ErrorCategory::unsupported, "node 'padded_avg_pool' (avg_pool2d) counts padding");
  Graph flat_output = every_kind_graph();
  flat_output.nodes.resize(13);  // ends in the flatten of [8, 3, 3]: XNNPACK's order is not ATen's
  expect_refused(flat_output, ErrorCategory::unsupported, "node 'flatten' (flatten) is the output");
  Graph empty_clamp = every_kind_graph();
  empty_clamp.nodes[6].activation = {ActivationKind::clamp, 0.5, 0.5};
  expect_refused(empty_clamp, ErrorCategory::unsupported, "node 'clamp' (clamp) clamps to the empty range");
  Graph no_layers;
  no_layers.input_shape = {4};
  no_layers.nodes.push_back(layer(NodeKind::input, "input", {}));
  expect_refused(no_layers, ErrorCategory::unsupported, "no layers");
  const auto runtime = xnnpack_runtime_model(every_kind_graph(), 1, 1);
  for (const auto& shape :
       std::vector<std::vector<std::int64_t>>{{2, 3, 11, 11}, {1, 3, 12, 11}, {3, 11, 11}}) {
    try {
      runtime->forward(torch::rand(shape));
      ADD_FAILURE() << "ran an input it was not built for";
    } catch (const Error& error) {
      EXPECT_EQ(error.category(), ErrorCategory::invalid_input);
      EXPECT_NE(std::string(error.what()).find("built for batch 1 of [3, 11, 11]"), std::string::npos)
          << error.what();
    }
  }
}

// One runtime, four threads: each caller gets its own input's answer, whether it waited for the runtime or
// ran on the busy fallback.
TEST(XnnpackRuntime, ConcurrentCallersEachGetTheirOwnAnswer) {
  if (!xnnpack_runtime_available()) GTEST_SKIP() << "built without XNNPACK (libxnnpack-dev)";
  const Graph graph = every_kind_graph();
  expect_concurrent_callers_get_their_own_answers(graph, [&](std::shared_ptr<const InferenceModel> busy) {
    return xnnpack_runtime_model(graph, 1, 1, std::move(busy));
  });
}

// A batch's rows split across one-thread runtimes answers as one runtime on the whole batch (rows are
// independent), in order, over uneven slices, counted as one XNNPACK call; concurrent callers each get their
// own answer.
TEST(XnnpackRowSplit, AnswersAsOneRuntimeAndCountsOneCall) {
  if (!xnnpack_runtime_available()) GTEST_SKIP() << "built without XNNPACK (libxnnpack-dev)";
  EXPECT_EQ(row_split_sizes(7, 3), (std::vector<std::int64_t>{3, 2, 2}));
  EXPECT_EQ(row_split_sizes(64, 2), (std::vector<std::int64_t>{32, 32}));
  EXPECT_TRUE(row_split_sizes(1, 2).empty());
  const Graph graph = every_kind_graph();
  torch::NoGradGuard no_grad;
  const auto whole = xnnpack_runtime_model(graph, 7, 1);
  std::vector<std::int64_t> built_rows;
  const auto split = xnnpack_row_split_model(
      [&](std::int64_t rows) {
        built_rows.push_back(rows);
        return xnnpack_runtime_model(graph, rows, 1);
      },
      7, 3);
  EXPECT_EQ(built_rows, (std::vector<std::int64_t>{3, 2, 2}));
  EXPECT_EQ(split->sample_shape, whole->sample_shape);
  for (int call = 0; call < 3; ++call) {
    const torch::Tensor pixels = torch::rand({7, 3, 11, 11});
    const std::uint64_t calls_before = xnnpack_runtime_calls();
    const torch::Tensor answer = split->forward(pixels);  // [7, classes]
    EXPECT_EQ(xnnpack_runtime_calls() - calls_before, 1u);
    EXPECT_LT(relative_difference(answer, whole->forward(pixels)), 1e-6) << "call " << call;
  }
  EXPECT_EQ(wrong_answers_of_concurrent_callers(graph, *split, 3, 20, 7), 0);
  try {
    split->forward(torch::rand({6, 3, 11, 11}));
    ADD_FAILURE() << "a batch of 6 reached a split built for 7";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::invalid_input) << error.what();
  }
}

// Splits that cannot be made are refused naming why; a slice that throws puts its error on the caller, and
// the split answers the next call.
TEST(XnnpackRowSplit, RefusesSplitsItCannotMakeAndRaisesASlicesError) {
  if (!xnnpack_runtime_available()) GTEST_SKIP() << "built without XNNPACK (libxnnpack-dev)";
  class Rows : public InferenceModel {  // answers each row's first value; throws while `fail` is set
   public:
    explicit Rows(const std::atomic<bool>& fail) : fail_(fail) {}
    torch::Tensor forward(const torch::Tensor& input) const override {
      if (fail_) fail(ErrorCategory::runtime, "slice failed on purpose");
      return input.flatten(1).narrow(1, 0, 1).clone();  // [rows, 1]
    }

   private:
    const std::atomic<bool>& fail_;
  };
  std::atomic<bool> second_fails{false};
  const std::atomic<bool> never{false};
  int built = 0;
  const RowRuntimeBuilder build = [&](std::int64_t) -> std::shared_ptr<InferenceModel> {
    return std::make_shared<Rows>(built++ == 1 ? second_fails : never);
  };
  for (const auto& [batch, parts] : {std::pair<std::int64_t, int>{4, 1}, {1, 2}}) {
    try {
      xnnpack_row_split_model(build, batch, parts);
      ADD_FAILURE() << batch << " rows in " << parts;
    } catch (const Error& error) {
      EXPECT_EQ(error.category(), ErrorCategory::invalid_input);
      EXPECT_NE(std::string(error.what()).find("a split needs at least 2 threads and a row for each"),
                std::string::npos)
          << error.what();
    }
  }
  const auto split = xnnpack_row_split_model(build, 4, 2);
  const torch::Tensor input = torch::arange(8, torch::kFloat).view({4, 2});  // rows start 0, 2, 4, 6
  EXPECT_TRUE(torch::equal(split->forward(input), torch::tensor({0.f, 2.f, 4.f, 6.f}).view({4, 1})));
  second_fails = true;
  try {
    split->forward(input);
    ADD_FAILURE() << "the second slice's error was lost";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::runtime);
    EXPECT_NE(std::string(error.what()).find("slice failed on purpose"), std::string::npos);
  }
  second_fails = false;
  EXPECT_TRUE(torch::equal(split->forward(input), torch::tensor({0.f, 2.f, 4.f, 6.f}).view({4, 1})));
}

}  // namespace
}  // namespace ipj::infer
