// Graph IR builders shared by the runtimes' tests (XNNPACK's, oneDNN's): single layers, and one graph with
// every node kind the IR has, checked against the graph interpreter (ATen), alone and by concurrent callers.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ipj/infer/inference_model.hpp"
#include "ipj/quant/graph.hpp"

namespace ipj::infer::graph_fixture {

using quant::ActivationKind;
using quant::Graph;
using quant::GraphNode;
using quant::NodeKind;

inline GraphNode layer(NodeKind kind, const std::string& name, std::vector<std::size_t> inputs) {
  GraphNode node;
  node.kind = kind;
  node.name = name;
  node.inputs = std::move(inputs);
  return node;
}

inline GraphNode conv(const std::string& name, std::size_t input, std::int64_t in, std::int64_t out,
                      std::int64_t kernel, std::int64_t groups = 1) {
  GraphNode node = layer(NodeKind::conv2d, name, {input});
  node.weight = torch::randn({out, in / groups, kernel, kernel}) * 0.4;
  node.bias = torch::randn({out}) * 0.1;
  node.padding = {kernel / 2, kernel / 2};
  node.groups = groups;
  return node;
}

// The same with a fused ReLU.
inline GraphNode relu_conv(const std::string& name, std::size_t input, std::int64_t in, std::int64_t out,
                           std::int64_t kernel) {
  GraphNode node = conv(name, input, in, out, kernel);
  node.activation.kind = quant::ActivationKind::relu;
  return node;
}

inline GraphNode linear(const std::string& name, std::size_t input, std::int64_t in, std::int64_t out) {
  GraphNode node = layer(NodeKind::linear, name, {input});
  node.weight = torch::randn({out, in}) * 0.2;
  node.bias = torch::randn({out}) * 0.1;
  return node;
}

inline GraphNode pool(NodeKind kind, const std::string& name, std::size_t input, std::int64_t kernel,
                      std::int64_t stride, std::int64_t padding) {
  GraphNode node = layer(kind, name, {input});
  node.kernel = {kernel, kernel};
  node.stride = {stride, stride};
  node.padding = {padding, padding};
  return node;
}

// [3, 11, 11] normalised input -> strided conv + relu, depthwise (dilated) + relu6, pointwise, residual add
// + relu, ceil-mode padded max pool, clamp, average pools (unpadded counting padding; padded leaving it
// out), a convolution, adaptive pool to 3x3 from the residual, their sum, flatten of [8, 3, 3] (XNNPACK's
// H, W, C order), two linear layers -> [5]. Every node feeds the output.
inline Graph every_kind_graph() {
  torch::manual_seed(11);
  Graph graph;
  graph.model_name = "every_kind";
  graph.input_shape = {3, 11, 11};
  graph.input_mean = {0.5f, 0.4f, 0.3f};
  graph.input_std = {0.2f, 0.25f, 0.3f};
  graph.nodes.push_back(layer(NodeKind::input, "input", {}));
  GraphNode stem = conv("stem", 0, 3, 8, 3);  // -> [8, 6, 6]
  stem.stride = {2, 2};
  stem.activation.kind = ActivationKind::relu;
  graph.nodes.push_back(stem);
  GraphNode depthwise = conv("depthwise", 1, 8, 8, 3, 8);
  depthwise.dilation = {2, 2};
  depthwise.padding = {2, 2};
  depthwise.activation = {ActivationKind::clamp, 0.0, 6.0};
  graph.nodes.push_back(depthwise);                      // 2
  graph.nodes.push_back(conv("pointwise", 2, 8, 8, 1));  // 3
  GraphNode add = layer(NodeKind::add, "add", {3, 1});
  add.activation.kind = ActivationKind::relu;
  graph.nodes.push_back(add);  // 4
  GraphNode max_pool = pool(NodeKind::max_pool2d, "max_pool", 4, 3, 2, 1);
  max_pool.ceil_mode = true;        // [8, 6, 6] -> [8, 4, 4] (3 without ceil mode)
  graph.nodes.push_back(max_pool);  // 5
  GraphNode clamp = layer(NodeKind::clamp, "clamp", {5});
  clamp.activation = {ActivationKind::clamp, 0.1, 2.5};
  graph.nodes.push_back(clamp);                                               // 6
  graph.nodes.push_back(pool(NodeKind::avg_pool2d, "avg_pool", 6, 2, 1, 0));  // 7: [8, 3, 3]
  GraphNode padded_avg = pool(NodeKind::avg_pool2d, "padded_avg_pool", 7, 3, 1, 1);
  padded_avg.count_include_pad = false;
  graph.nodes.push_back(padded_avg);  // 8: [8, 3, 3]
  GraphNode stem2 = conv("widen", 8, 8, 8, 3);
  graph.nodes.push_back(stem2);  // 9: [8, 3, 3]
  GraphNode adaptive = layer(NodeKind::adaptive_avg_pool2d, "adaptive", {4});
  adaptive.output_size = {3, 3};                                      // [8, 6, 6] -> [8, 3, 3]
  graph.nodes.push_back(adaptive);                                    // 10
  graph.nodes.push_back(layer(NodeKind::add, "add_pools", {9, 10}));  // 11
  graph.nodes.push_back(layer(NodeKind::flatten, "flatten", {11}));   // 12: [72]
  GraphNode fc1 = linear("fc1", 12, 72, 16);
  fc1.activation.kind = ActivationKind::relu;
  graph.nodes.push_back(fc1);                       // 13
  graph.nodes.push_back(linear("fc2", 13, 16, 5));  // 14
  return graph;
}

inline double relative_difference(const torch::Tensor& got, const torch::Tensor& expected) {
  EXPECT_EQ(got.sizes(), expected.sizes());
  if (got.sizes() != expected.sizes()) return INFINITY;
  return (got - expected).abs().max().item<double>() / std::max(1.0, expected.abs().max().item<double>());
}

// `build(batch, threads)`'s runtime of `graph` (every_kind_graph's [3, 11, 11] input) at batches 1 and 3 and
// threads 1 and 2 answers as the graph interpreter, twice each (its buffers are reused: a second call gets
// its own answer), after the memory the weights came from may have been reused.
inline void expect_runtime_answers_as_interpreter(
    const Graph& graph,
    const std::function<std::shared_ptr<const InferenceModel>(std::int64_t, int)>& build) {
  torch::NoGradGuard no_grad;
  for (const std::int64_t batch : {1, 3}) {
    for (const int threads : {1, 2}) {
      const auto runtime = build(batch, threads);
      std::vector<torch::Tensor> scribble;
      for (int block = 0; block < 8; ++block)
        scribble.push_back(torch::full({1 << 16}, 1e3));
      for (int call = 0; call < 2; ++call) {
        const torch::Tensor pixels = torch::rand({batch, 3, 11, 11});
        EXPECT_LT(relative_difference(runtime->forward(pixels), quant::run_graph(graph, pixels)), 1e-5)
            << "batch " << batch << ", threads " << threads << ", call " << call;
      }
    }
  }
}

// The graph interpreter as a model (a runtime's busy fallback), counting its calls.
class GraphInterpreter : public InferenceModel {
 public:
  explicit GraphInterpreter(Graph graph) : graph_(std::move(graph)) {}
  torch::Tensor forward(const torch::Tensor& input) const override {
    ++calls;
    return quant::run_graph(graph_, input);
  }
  mutable std::atomic<int> calls{0};

 private:
  Graph graph_;
};

// How many of `threads` callers x `calls` calls each, all at once, got another answer from `model` than the
// graph interpreter's on their own [batch, 3, 11, 11] input (every_kind_graph's).
inline int wrong_answers_of_concurrent_callers(const Graph& graph, const InferenceModel& model, int threads,
                                               int calls, std::int64_t batch) {
  std::atomic<int> wrong{0};
  std::vector<std::thread> callers;
  for (int thread = 0; thread < threads; ++thread)
    callers.emplace_back([&, thread] {
      torch::NoGradGuard no_grad;
      for (int call = 0; call < calls; ++call) {
        const torch::Tensor pixels = torch::full({batch, 3, 11, 11}, 0.01 * (thread * calls + call));
        if (relative_difference(model.forward(pixels), quant::run_graph(graph, pixels)) > 1e-5) ++wrong;
      }
    });
  for (std::thread& caller : callers)
    caller.join();
  return wrong.load();
}

// `build(busy)`'s batch-1 runtime of `graph` (every_kind_graph's [3, 11, 11] input), four threads calling it
// at once, 40 calls each, without and with the interpreter as its busy fallback: each caller gets its own
// input's answer, whether it waited for the runtime or ran on the fallback; without one nothing falls back.
inline void expect_concurrent_callers_get_their_own_answers(
    const Graph& graph,
    const std::function<std::shared_ptr<const InferenceModel>(std::shared_ptr<const InferenceModel>)>&
        build) {
  const auto interpreter = std::make_shared<GraphInterpreter>(graph);
  for (const bool with_fallback : {false, true}) {
    const auto runtime = build(with_fallback ? interpreter : nullptr);
    EXPECT_EQ(wrong_answers_of_concurrent_callers(graph, *runtime, 4, 40, 1), 0)
        << "with fallback " << with_fallback;
    if (!with_fallback) {
      EXPECT_EQ(interpreter->calls.load(), 0);
    }
  }
}

}  // namespace ipj::infer::graph_fixture
