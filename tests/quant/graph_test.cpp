// The graph IR and its TorchScript importer on models made at test time by python3-torch/torchvision (a CNN
// with BatchNorm, a small residual net, ResNet-18 and MobileNetV2 with 1-channel stems; scripted and traced):
// the float graph equals PyTorch's outputs, int8 residual and depthwise models stay close to fp32 on real
// Fashion-MNIST images, files round-trip, unsupported operators are named with their module path, and ipj's
// zoo ResNet-18 quantizes.
#include <gtest/gtest.h>

#include <torch/script.h>
#include <torch/torch.h>
#include <algorithm>

#include "graph_models_fixture.hpp"
#include "inference_fixture.hpp"
#include "ipj/core/error.hpp"
#include "ipj/data/batch_loader.hpp"
#include "ipj/device/threading.hpp"
#include "ipj/models/registry.hpp"
#include "ipj/quant/graph_builders.hpp"
#include "ipj/quant/graph_file.hpp"
#include "ipj/quant/quantized_graph.hpp"
#include "ipj/quant/torchscript_import.hpp"

namespace ipj::quant {
namespace {

using testing::graph_models;
using testing::kGraphModelMean;
using testing::kGraphModelStd;

Graph import_model(const std::string& model, const std::string& how) {
  return import_torchscript_file(graph_models().file(model + "_" + how + ".pt"),
                                 testing::graph_model_import_options(model));
}

using testing::test_pixels;

double relative_error(const torch::Tensor& actual, const torch::Tensor& expected) {
  return ((actual - expected).norm() / expected.norm()).item<double>();
}

double argmax_agreement(const torch::Tensor& actual, const torch::Tensor& expected) {
  return actual.argmax(1).eq(expected.argmax(1)).to(torch::kFloat).mean().item<double>();
}

class ImportedModel : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(ImportedModel, FloatGraphEqualsPyTorch) {
  const auto& [model, how] = GetParam();
  const Graph graph = import_model(model, how);
  torch::NoGradGuard no_grad;
  const torch::Tensor expected = graph_models().tensor(model);  // PyTorch's own output on the same pixels
  const torch::Tensor output = run_graph(graph, graph_models().tensor("input"));
  const double scale = std::max(1.0, expected.abs().max().item<double>());
  EXPECT_LT((output - expected).abs().max().item<double>(), 1e-4 * scale) << model << " " << how;
  EXPECT_EQ(graph.num_classes, 10);
  EXPECT_TRUE(graph.input_mean.empty()) << "the normalisation folds into the first convolution";
}

INSTANTIATE_TEST_SUITE_P(
    PythonModels, ImportedModel,
    ::testing::Combine(::testing::Values("cnn_bn", "residual", "resnet18", "mobilenet_v2"),
                       ::testing::Values("scripted", "traced")),
    [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

TEST(GraphImport, NodesAreNamedAfterTheirModulePaths) {
  for (const char* how : {"scripted", "traced"}) {
    const Graph graph = import_model("resnet18", how);
    std::set<std::string> names;
    for (const GraphNode& node : graph.nodes)
      names.insert(node.name);
    for (const char* expected : {"input", "conv1", "layer1.0.conv1", "layer1.0.add", "layer2.0.downsample.0",
                                 "avgpool", "flatten", "fc"})
      EXPECT_TRUE(names.count(expected)) << how << ": no node '" << expected << "'";
    EXPECT_EQ(graph.nodes.back().name, "fc");
    // 20 convolutions (BatchNorm folded into each), 8 residual adds, ReLUs fused
    std::map<NodeKind, int> kinds;
    for (const GraphNode& node : graph.nodes)
      ++kinds[node.kind];
    EXPECT_EQ(kinds[NodeKind::conv2d], 20) << how;
    EXPECT_EQ(kinds[NodeKind::add], 8) << how;
    EXPECT_EQ(kinds[NodeKind::clamp], 0) << how;
  }
}

TEST(GraphImport, DepthwiseConvolutionsAndRelu6AreKept) {
  const Graph graph = import_model("mobilenet_v2", "scripted");
  int depthwise = 0, relu6 = 0;
  for (const GraphNode& node : graph.nodes) {
    if (node.kind == NodeKind::conv2d && node.groups > 1 && node.groups == node.weight.size(0)) ++depthwise;
    if (node.activation.kind == ActivationKind::clamp && node.activation.max == 6.0) ++relu6;
  }
  EXPECT_EQ(depthwise, 17);
  EXPECT_EQ(relu6, 35);
}

std::string import_error(const std::string& file, const std::vector<std::int64_t>& input_shape) {
  try {
    ImportOptions options;
    options.input_shape = input_shape;
    import_torchscript_file(graph_models().file(file), options);
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::unsupported);
    return error.what();
  }
  ADD_FAILURE() << file << " was imported";
  return "";
}

TEST(GraphImport, UnsupportedOperatorsAreNamedWithTheirModulePath) {
  const std::string lstm = import_error("lstm.pt", {28, 28});
  EXPECT_NE(lstm.find("aten::"), std::string::npos) << lstm;  // the first op outside the IR (a shape check)
  EXPECT_NE(lstm.find("module 'rnn'"), std::string::npos) << lstm;
  EXPECT_NE(lstm.find("LSTM"), std::string::npos) << lstm;
  const std::string swish = import_error("swish.pt", {1, 28, 28});
  EXPECT_NE(swish.find("aten::sigmoid"), std::string::npos) << swish;
  EXPECT_NE(swish.find("module 'block.1'"), std::string::npos) << swish;
  // Joining tensors names the join, not the list it reads (a hostile pass: "prim::ListConstruct ... computed
  // at run time").
  testing::TempDir dir;
  torch::jit::Module joined("Joined");
  joined.register_parameter("w", torch::randn({10, 1568}), false);
  joined.define(R"(
def forward(self, x: Tensor) -> Tensor:
    return torch.linear(torch.cat([x, x], 1).flatten(1), self.w)
)");
  joined.save(dir.file("joined.pt"));
  try {
    ImportOptions options;
    options.input_shape = {1, 28, 28};
    import_torchscript_file(dir.file("joined.pt"), options);
    ADD_FAILURE() << "a torch.cat model was imported";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("for aten::cat"), std::string::npos) << message;
    EXPECT_NE(message.find("torch.cat"), std::string::npos) << message;
  }
}

// B = x.shape[0] scripts to aten::size(x) and aten::__getitem__(sizes, 0): the batch size, as x.size(0) is
// (it was refused as "reads a tensor size other than the batch size", so static int8, pruning and the
// graph's ONNX export all refused such models). Another item of the sizes is still refused, and says so.
TEST(GraphImport, BatchSizeReadAsShapeItemZeroImportsAndOtherItemsAreRefused) {
  testing::TempDir dir;
  for (const int item : {0, 1}) {
    torch::jit::Module module("ShapeItem");
    module.register_parameter("w", torch::randn({10, 784}), false);
    module.define("def forward(self, x: Tensor) -> Tensor:\n    B = x.shape[" + std::to_string(item) +
                  "]\n    return torch.linear(torch.relu(x).reshape(B, -1), self.w)\n");
    const std::string path = dir.file("shape_item" + std::to_string(item) + ".pt");
    module.save(path);
    ImportOptions options;
    options.input_shape = {1, 28, 28};
    if (item == 0) {
      const Graph graph = import_torchscript_file(path, options);
      EXPECT_LT(import_difference(torch::jit::load(path), graph, options, test_pixels(8)), 1e-5);
      continue;
    }
    try {
      import_torchscript_file(path, options);
      ADD_FAILURE() << "x.shape[1] was taken for the batch size";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("reads a tensor size other than the batch size"),
                std::string::npos)
          << error.what();
    }
  }
}

TEST(GraphImport, ImportDifferenceIsTheSelfCheck) {
  torch::jit::Module module = torch::jit::load(graph_models().file("residual_traced.pt"));
  const Graph graph = import_model("residual", "traced");
  EXPECT_LT(
      import_difference(module, graph, testing::graph_model_import_options("residual"), test_pixels(32)),
      1e-5);
  ImportOptions wrong = testing::graph_model_import_options("residual");
  wrong.mean = {0.0f};  // the graph folded another normalisation than this one
  EXPECT_GT(import_difference(module, graph, wrong, test_pixels(32)), 1e-2);
}

struct Int8Case {
  std::string model;
  double min_agreement;
  double max_relative_error;
};

class Int8Graph : public ::testing::TestWithParam<Int8Case> {};

// Static int8 (calibrated on 512 real training images) against the float graph on 256 test images.
TEST_P(Int8Graph, StaysCloseToFp32) {
  const Int8Case& test_case = GetParam();
  const Graph graph = import_model(test_case.model, "scripted");
  const auto params =
      calibrate_graph(graph, testing::fashion_subset().train, 512, 128, ObserverKind::minmax, 100.0);
  const QuantizedGraph int8 = QuantizedGraph::convert(graph, QuantMode::static_ptq, params, "auto");
  torch::NoGradGuard no_grad;
  const torch::Tensor pixels = test_pixels(256);
  const torch::Tensor expected = run_graph(graph, pixels);
  const torch::Tensor actual = int8.forward(pixels);
  const double agreement = argmax_agreement(actual, expected), error = relative_error(actual, expected);
  RecordProperty("argmax_agreement", std::to_string(agreement));
  EXPECT_GE(agreement, test_case.min_agreement) << test_case.model << " relative error " << error;
  EXPECT_LE(error, test_case.max_relative_error) << test_case.model << " agreement " << agreement;
  EXPECT_LT(int8.parameter_bytes(), graph_float_parameter_bytes(graph) / 3);
  // one row after many rows, then more, on two threads and on one: oneDNN's 1x1 convolutions with a 1x1
  // output failed on every batch size of another kind than the first, and on one row after one row on
  // another thread count (ResNet-18, MobileNetV2 at 28x28)
  for (const auto& [rows, threads] :
       std::vector<std::pair<std::int64_t, int>>{{1, 2}, {2, 2}, {1, 1}, {3, 1}, {1, 2}}) {
    const device::CallerOpenMpThreads scope(threads);
    const torch::Tensor part = int8.forward(pixels.narrow(0, 0, rows));  // [rows, 10]
    EXPECT_LT((part - actual.narrow(0, 0, rows)).abs().max().item<double>(),
              1e-3 * std::max(1.0, actual.abs().max().item<double>()))
        << test_case.model << " at batch " << rows << " on " << threads << " thread(s)";
  }
  // and against PyTorch's own fp32 outputs of the module on the 64 golden images
  const torch::Tensor pytorch = graph_models().tensor(test_case.model);
  const torch::Tensor golden_int8 = int8.forward(graph_models().tensor("input"));
  EXPECT_GE(argmax_agreement(golden_int8, pytorch), test_case.min_agreement - 0.02) << test_case.model;
  EXPECT_LE(relative_error(golden_int8, pytorch), test_case.max_relative_error) << test_case.model;
}

// Untrained resnet18 / mobilenet_v2 (random weights, BatchNorm statistics only) are hard cases for int8:
// LibTorch's own graph-mode passes (quantize_jit, bench/user_models.sh) reach argmax agreement 0.84-0.88 /
// 0.17-0.25 and relative error 0.14-0.17 / 1.0-1.8 on them; ipj measured 0.79 / 0.36 and 0.23 / 0.77
// (oneDNN). The bounds below hold ipj to at least that.
INSTANTIATE_TEST_SUITE_P(PythonModels, Int8Graph,
                         ::testing::Values(Int8Case{"cnn_bn", 0.97, 0.05}, Int8Case{"residual", 0.95, 0.08},
                                           Int8Case{"resnet18", 0.75, 0.3},
                                           Int8Case{"mobilenet_v2", 0.3, 0.9}),
                         [](const auto& info) { return info.param.model; });

// LibTorch 1.13's QNNPACK clamp/hardtanh scrambles channels-last quantized tensors (2.7 off on a 0.02 grid),
// and its fbgemm clamp with a max of +inf (`torch.clamp(x, min=m)` imports as clamp(m, +inf)) sends every
// element to the lowest quantum (a hostile pass: int8 batches answered one set of logits for every input);
// apply_activation's clamp is exact under every engine this build has, one-sided too, and keeps the memory
// format.
TEST(QuantizedClamp, ExactOnChannelsLastAndOneSidedClampsUnderEveryEngine) {
  torch::manual_seed(5);
  const double infinity = std::numeric_limits<double>::infinity();
  const torch::Tensor x = torch::randn({2, 8, 5, 5});
  const at::QEngine before = at::globalContext().qEngine();
  for (const auto format : {at::MemoryFormat::ChannelsLast, at::MemoryFormat::Contiguous}) {
    const torch::Tensor q = torch::quantize_per_tensor(x.contiguous(format), 0.02, 128, torch::kQUInt8);
    for (const auto& [low, high] :
         {std::pair{-3.0, 0.1}, {-0.06, infinity}, {-infinity, 0.5}, {-infinity, infinity}}) {
      const torch::Tensor expected = q.dequantize().clamp(low, high);
      for (const std::string& engine : available_quantized_engines()) {
        select_quantized_engine(engine);
        const torch::Tensor y = apply_activation({ActivationKind::clamp, low, high}, q);
        const std::string where =
            engine + " clamp(" + std::to_string(low) + ", " + std::to_string(high) + ")";
        EXPECT_LT((y.dequantize() - expected).abs().max().item<double>(), 1e-6) << where;
        EXPECT_TRUE(y.is_contiguous(format)) << where;
        EXPECT_EQ(y.q_zero_point(), 128) << where;
      }
    }
  }
  at::globalContext().setQEngine(before);
}

// Values far beyond the 8-bit range saturate like any value beyond it: LibTorch 1.13's quantize_per_tensor
// maps magnitudes of about 1e17 and above to the lowest code, so +1e20 answered as -1e20 did (a hostile
// pass).
TEST(Int8GraphInputs, HugeValuesSaturateLikeLargeOnes) {
  const Graph graph = import_model("cnn_bn", "scripted");
  const auto params =
      calibrate_graph(graph, testing::fashion_subset().train, 64, 64, ObserverKind::minmax, 100.0);
  const QuantizedGraph int8 = QuantizedGraph::convert(graph, QuantMode::static_ptq, params, "auto");
  torch::NoGradGuard no_grad;
  const auto answer = [&](double value) { return int8.forward(torch::full({2, 1, 28, 28}, value)); };
  EXPECT_TRUE(torch::equal(answer(1e20), answer(1e6)));
  EXPECT_TRUE(torch::equal(answer(-1e20), answer(-1e6)));
  EXPECT_FALSE(torch::equal(answer(1e20), answer(-1e20)));
}

// The quantized engine is the process's: a model loaded later with another engine (a server's second model)
// must not change the kernels, and so the answers, of one loaded before.
TEST(Int8GraphEngine, AnotherModelsEngineDoesNotChangeThisModelsAnswers) {
  const std::vector<std::string> engines = available_quantized_engines();
  if (std::find(engines.begin(), engines.end(), "qnnpack") == engines.end() ||
      std::find(engines.begin(), engines.end(), "onednn") == engines.end())
    GTEST_SKIP() << "needs the onednn and qnnpack engines";
  const at::QEngine before = at::globalContext().qEngine();
  const Graph graph = import_model("mobilenet_v2", "scripted");  // relu6 clamps after its convolutions
  const auto params =
      calibrate_graph(graph, testing::fashion_subset().train, 64, 64, ObserverKind::minmax, 100.0);
  const QuantizedGraph int8 = QuantizedGraph::convert(graph, QuantMode::static_ptq, params, "onednn");
  torch::NoGradGuard no_grad;
  const torch::Tensor pixels = test_pixels(8);
  const torch::Tensor alone = int8.forward(pixels);  // [8, 10]
  const QuantizedGraph other = QuantizedGraph::convert(graph, QuantMode::static_ptq, params, "qnnpack");
  EXPECT_EQ(at::globalContext().qEngine(), at::QEngine::QNNPACK);
  EXPECT_EQ((int8.forward(pixels) - alone).abs().max().item<double>(), 0.0);
  const torch::Tensor on_qnnpack = other.forward(pixels);
  // the same int8 model on QNNPACK's kernels: as close to the float graph as oneDNN's run is allowed to be
  // (untrained MobileNetV2 amplifies rounding: Int8Graph.StaysCloseToFp32)
  EXPECT_LE(relative_error(on_qnnpack, run_graph(graph, pixels)), 0.9);
  at::globalContext().setQEngine(before);
}

// The classifier's output stays float in static int8: 8-bit logits (at most 256 values on one grid) flipped
// close calls (0.41 pt of MobileNetV2's drop on Fashion-MNIST, docs/INFERENCE.md).
TEST(Int8GraphLogits, FinalLinearLayerWritesFloatLogits) {
  const Graph graph = import_model("cnn_bn", "scripted");
  const auto params =
      calibrate_graph(graph, testing::fashion_subset().train, 256, 128, ObserverKind::minmax, 100.0);
  const QuantizedGraph int8 = QuantizedGraph::convert(graph, QuantMode::static_ptq, params, "auto");
  torch::NoGradGuard no_grad;
  const torch::Tensor pixels = test_pixels(64);
  const torch::Tensor logits = int8.forward(pixels);  // [64, 10]
  const double logit_step = params.back().scale;      // the grid 8-bit logits would lie on
  const torch::Tensor steps = logits / logit_step;
  EXPECT_GT((steps - steps.round()).abs().max().item<double>(), 0.1);
  EXPECT_GT(std::get<0>(at::_unique(logits.flatten())).numel(), 256);
  EXPECT_LE(relative_error(logits, run_graph(graph, pixels)), 0.05);
}

// ipj's own ResNet-18 (CIFAR-style stem, BatchNorm statistics from one train-mode pass over real images):
// extracted by parameter names, static int8 agrees with the float graph, which equals the module.
// The XNNPACK runtimes' input written without ATen's operators: bit for bit prepare_graph_input's values in
// NHWC (normalised per channel or by one value, the folded first layer's mean padding), [B, F] for flat
// inputs; inputs it does not take are left to ATen (false, nothing written).
TEST(GraphInput, WrittenStraightToNhwcIsPrepareGraphInputBitForBit) {
  Graph graph;
  graph.input_shape = {3, 5, 4};
  const auto written = [&graph](const torch::Tensor& input) {
    const std::int64_t pad = graph.input_padding;
    torch::Tensor out = torch::full({input.size(0), 5 + 2 * pad, 4 + 2 * pad, 3}, NAN);  // [B, H', W', C]
    EXPECT_TRUE(write_graph_input_nhwc(graph, input, out.data_ptr<float>()));
    return out;
  };
  const auto prepared = [&graph](const torch::Tensor& input) {  // [B, C, H', W'] -> [B, H', W', C]
    return prepare_graph_input(graph, input).permute({0, 2, 3, 1}).contiguous();
  };
  const torch::Tensor input = torch::randn({2, 3, 5, 4}) * 3.0;  // [2, 3, 5, 4]
  EXPECT_TRUE(torch::equal(written(input), prepared(input)));    // as it is
  graph.input_mean = {0.3f, -0.7f, 0.11f};
  graph.input_std = {0.35f, 1.3f, 0.07f};
  EXPECT_TRUE(torch::equal(written(input), prepared(input)));
  graph.input_padding = 2;
  graph.input_pad_value = {0.1f, -2.5f, 7.0f};
  EXPECT_TRUE(torch::equal(written(input), prepared(input)));
  graph.input_mean = {0.286f};
  graph.input_std = {0.353f};
  graph.input_pad_value = {-0.81f};
  EXPECT_TRUE(torch::equal(written(input), prepared(input)));
  EXPECT_TRUE(torch::equal(written(input.flatten(1)), prepared(input.flatten(1))));  // pixels, flat

  float unused[1] = {0.0f};
  EXPECT_FALSE(write_graph_input_nhwc(graph, input.transpose(2, 3), unused));  // not contiguous
  EXPECT_FALSE(write_graph_input_nhwc(graph, input.to(torch::kDouble), unused));
  EXPECT_FALSE(write_graph_input_nhwc(graph, input.narrow(3, 0, 3).contiguous(), unused));  // other size
  graph.input_mean = {0.1f, 0.2f};  // neither one value nor one per channel: ATen's error
  graph.input_std = {1.0f, 1.0f};
  EXPECT_FALSE(write_graph_input_nhwc(graph, input, unused));
  EXPECT_EQ(unused[0], 0.0f);

  Graph flat;  // [F]: per-feature normalisation, no padding
  flat.input_shape = {6};
  flat.input_mean = {0.0f, 1.0f, 2.0f, 3.0f, 4.0f, 5.0f};
  flat.input_std = {1.0f, 0.5f, 0.25f, 3.0f, 7.0f, 0.1f};
  const torch::Tensor features = torch::randn({3, 6});  // [3, 6]
  torch::Tensor out = torch::empty({3, 6});
  ASSERT_TRUE(write_graph_input_nhwc(flat, features, out.data_ptr<float>()));
  EXPECT_TRUE(torch::equal(out, prepare_graph_input(flat, features)));
}

TEST(ZooResNet, StaticInt8OfIpjsResNet18StaysCloseToFp32) {
  torch::manual_seed(3);
  auto model = models::create_model("resnet18", models::InputShape{1, 28, 28}, 10);
  const Json info = {{"name", "resnet18"},
                     {"input_shape", {1, 28, 28}},
                     {"num_classes", 10},
                     {"mean", {kGraphModelMean}},
                     {"std", {kGraphModelStd}}};
  const torch::Tensor pixels = test_pixels(64);
  const torch::Tensor normalized = (pixels - kGraphModelMean) / kGraphModelStd;
  {
    torch::NoGradGuard no_grad;
    model->train();
    for (int pass = 0; pass < 2; ++pass)
      model->forward(normalized);  // BatchNorm statistics
    model->eval();
  }
  const Graph graph = extract_graph(*model, info);
  torch::NoGradGuard no_grad;
  const torch::Tensor module_output = model->forward(normalized);
  const torch::Tensor expected = run_graph(graph, pixels);
  EXPECT_LT(relative_error(expected, module_output), 1e-4);
  const auto params =
      calibrate_graph(graph, testing::fashion_subset().train, 128, 64, ObserverKind::minmax, 100.0);
  const QuantizedGraph int8 = QuantizedGraph::convert(graph, QuantMode::static_ptq, params, "auto");
  const torch::Tensor actual = int8.forward(pixels);
  EXPECT_GE(argmax_agreement(actual, expected), 0.9);
  EXPECT_LE(relative_error(actual, expected), 0.1);
}

}  // namespace
}  // namespace ipj::quant
