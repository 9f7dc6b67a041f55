// XNNPACK's int8 runtimes against LibTorch's int8 kernels: a static int8 program (the trained mlp and cnn:
// the same logits up to requantization rounding, batch 1 and a larger batch, the refusal of dynamic int8)
// and static int8 graphs of user TorchScript models (as close to the float graph as LibTorch's kernels;
// refusals naming the node; the load path's fallback).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "inference_fixture.hpp"
#include "ipj/core/error.hpp"
#include "ipj/device/threading.hpp"
#include "ipj/infer/fp32_engine.hpp"
#include "ipj/infer/xnnpack_runtime.hpp"
#include "ipj/quant/quantize.hpp"
#include "ipj/quant/quantized_graph.hpp"
#include "ipj/quant/torchscript_import.hpp"
#include "ipj/train/checkpoint.hpp"
#include "quant/graph_models_fixture.hpp"

namespace ipj::infer {
namespace {

using quant::QuantizedProgram;
using quant::QuantMode;

QuantizedProgram static_int8(const std::string& model) {
  const train::TrainedModel trained = train::load_trained_model(testing::trained_checkpoint(model));
  const quant::LayerProgram program = quant::extract_program(*trained.model, trained.state.model_info);
  const auto params = quant::calibrate(program, testing::fashion_subset().train, 500, 128,
                                       quant::ObserverKind::minmax, 100.0);
  return QuantizedProgram::convert(program, QuantMode::static_ptq, params, "auto");
}

class XnnpackInt8 : public ::testing::TestWithParam<std::string> {};

TEST_P(XnnpackInt8, AnswersAsLibTorchsInt8KernelsUpToRounding) {
  if (!xnnpack_runtime_available()) GTEST_SKIP() << "built without XNNPACK";
  const QuantizedProgram int8 = static_int8(GetParam());
  const double output_scale = int8.output_params().back().scale;
  const torch::Tensor pixels = testing::test_pixels(200);  // [200, 1, 28, 28]
  const torch::Tensor reference = int8.forward(pixels);    // [200, 10]

  for (const std::int64_t batch : {1, 8}) {
    const std::shared_ptr<InferenceModel> runtime = xnnpack_int8_runtime_model(int8, batch);
    std::vector<torch::Tensor> outputs;
    for (std::int64_t start = 0; start + batch <= pixels.size(0); start += batch)
      outputs.push_back(runtime->forward(pixels.narrow(0, start, batch)));
    const torch::Tensor logits = torch::cat(outputs);
    const torch::Tensor expected = reference.narrow(0, 0, logits.size(0));
    // in output quanta: a rounding step of a layer moves a logit by about one quantum (measured: 0 on the
    // mlp, at most 1 on the cnn, mean 0.02)
    const torch::Tensor quanta = ((logits - expected).abs() / output_scale);
    EXPECT_LE(quanta.max().item<double>(), 2.01) << GetParam() << " batch " << batch;
    EXPECT_LT(quanta.mean().item<double>(), 0.1) << GetParam() << " batch " << batch;
    EXPECT_GT(logits.argmax(1).eq(expected.argmax(1)).to(torch::kDouble).mean().item<double>(), 0.98);
    // logits come out dequantized: multiples of the output scale
    const torch::Tensor steps = logits / output_scale;
    EXPECT_LT((steps - steps.round()).abs().max().item<double>(), 1e-3);
  }
}

TEST_P(XnnpackInt8, RefusesDynamicInt8AndOtherShapes) {
  if (!xnnpack_runtime_available()) GTEST_SKIP() << "built without XNNPACK";
  const train::TrainedModel trained = train::load_trained_model(testing::trained_checkpoint(GetParam()));
  const quant::LayerProgram program = quant::extract_program(*trained.model, trained.state.model_info);
  const QuantizedProgram dynamic = QuantizedProgram::convert(program, QuantMode::dynamic, {}, "auto");
  try {
    xnnpack_int8_runtime_model(dynamic, 1);
    FAIL() << "dynamic int8 accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::unsupported);
    EXPECT_NE(std::string(error.what()).find("dynamic"), std::string::npos) << error.what();
  }
  const std::shared_ptr<InferenceModel> runtime = xnnpack_int8_runtime_model(static_int8(GetParam()), 1);
  EXPECT_THROW(runtime->forward(torch::rand({2, 1, 28, 28})), Error);
  EXPECT_THROW(runtime->forward(torch::rand({1, 1, 27, 28})), Error);
}

// A pool splits the work, not the arithmetic: the same integers as on the calling thread.
TEST_P(XnnpackInt8, APoolAnswersExactlyAsTheCallingThread) {
  if (!xnnpack_runtime_available()) GTEST_SKIP() << "built without XNNPACK";
  const QuantizedProgram int8 = static_int8(GetParam());
  const torch::Tensor pixels = testing::test_pixels(16);  // [16, 1, 28, 28]
  const torch::Tensor alone = xnnpack_int8_runtime_model(int8, 16)->forward(pixels);
  const torch::Tensor pooled = xnnpack_int8_runtime_model(int8, 16, nullptr, 2)->forward(pixels);
  EXPECT_TRUE(torch::equal(alone, pooled)) << (alone - pooled).abs().max().item<double>();
}

// Rows split across one-thread int8 runtimes answer exactly as one runtime on the whole batch (XNNPACK's
// int8 rows are independent), the slices in order.
TEST_P(XnnpackInt8, ARowSplitAnswersExactlyAsOneRuntime) {
  if (!xnnpack_runtime_available()) GTEST_SKIP() << "built without XNNPACK";
  const QuantizedProgram int8 = static_int8(GetParam());
  const torch::Tensor pixels = testing::test_pixels(9);  // [9, 1, 28, 28]
  const torch::Tensor whole = xnnpack_int8_runtime_model(int8, 9)->forward(pixels);
  const RowRuntimeBuilder one_thread = [&int8](std::int64_t rows) {
    return xnnpack_int8_runtime_model(int8, rows);
  };
  for (const int parts : {2, 3}) {
    const torch::Tensor split = xnnpack_row_split_model(one_thread, 9, parts)->forward(pixels);
    EXPECT_TRUE(torch::equal(whole, split))
        << parts << " parts: " << (whole - split).abs().max().item<double>();
  }
}

// Loading a static int8 variant times the batch size the run names on XNNPACK's int8 runtime (a pool of the
// run's threads, or the rows split across one-thread runtimes: the faster) against LibTorch's int8 kernels
// and records it; whichever runs, the answers at that size and at padded partial sizes are LibTorch's up to
// requantization rounding. No record without a batch row, for an engine asked for by name, for dynamic int8,
// or where no int8 route is wanted (a reference).
TEST_P(XnnpackInt8, LoadingTimesTheRunsBatchOnXnnpacksInt8Runtime) {
  if (!xnnpack_runtime_available()) GTEST_SKIP() << "built without XNNPACK";
  LoadOptions options;
  options.run.variant = Variant::int8_static;
  options.run.pool_threads = 2;
  options.run.fp32_engine_batch = 8;
  options.calibration.samples = 256;
  const std::string checkpoint = testing::trained_checkpoint(GetParam());
  const std::uint64_t calls_before_load = xnnpack_runtime_calls();
  const InferenceModelPtr loaded = load_inference_model(checkpoint, options);
  EXPECT_EQ(xnnpack_runtime_calls(), calls_before_load);  // the load's timings answer no request
  ASSERT_TRUE(loaded->int8_batch_engine) << GetParam();
  const Int8BatchEngine& engine = *loaded->int8_batch_engine;
  EXPECT_EQ(engine.batch, 8);
  EXPECT_EQ(engine.threads, 2);
  EXPECT_GT(engine.libtorch_ms, 0.0) << engine.reason;
  EXPECT_GT(engine.xnnpack_ms, 0.0) << engine.reason;
  EXPECT_EQ(engine.reason.rfind("batch 8 on XNNPACK's int8 runtime (2 thread(s)) ", 0), 0u) << engine.reason;
  EXPECT_EQ(engine.xnnpack, engine.xnnpack_ms <= 0.9 * engine.libtorch_ms) << engine.reason;
  // batch 8 on 2 threads: one runtime on the pool and the rows split in two were both timed, the faster kept
  EXPECT_NE(engine.reason.find("; one runtime on a pool of 2 "), std::string::npos) << engine.reason;
  EXPECT_NE(engine.reason.find(", its rows split across 2 one-thread runtimes "), std::string::npos)
      << engine.reason;
  EXPECT_TRUE(engine.row_parts == 0 || engine.row_parts == 2) << engine.row_parts;
  EXPECT_EQ(to_json(engine)["row_parts"], engine.row_parts);
  if (engine.xnnpack) {
    EXPECT_GE(engine.min_rows, 2);
    EXPECT_LE(engine.min_rows, 8);
  }
  EXPECT_EQ(to_json(engine)["engine"], engine.xnnpack ? "xnnpack" : "libtorch");
  ASSERT_TRUE(loaded->batch1_threads);  // the batch-1 route is still there beneath

  // against the same model one row at a time (batch 1: its own route, on XNNPACK where its record says so):
  // LibTorch's and XNNPACK's int8 rounding differ by a quantum or two, about 1% of the logits' range; a row
  // out of place by far more
  const torch::Tensor pixels = testing::test_pixels(8);  // [8, 1, 28, 28]
  std::vector<torch::Tensor> singles;
  const bool batch1_on_xnnpack = loaded->batch1_threads->xnnpack;
  for (std::int64_t row = 0; row < 8; ++row) {
    const std::uint64_t calls_before = xnnpack_runtime_calls();
    singles.push_back(loaded->forward(pixels.narrow(0, row, 1)));
    EXPECT_EQ(xnnpack_runtime_calls() - calls_before, batch1_on_xnnpack ? 1u : 0u) << GetParam();
  }
  const torch::Tensor expected = torch::cat(singles);  // [8, 10]
  const double range = (expected.max() - expected.min()).item<double>();
  for (const std::int64_t rows : {8, 7, 3, 1}) {
    const device::CallerOpenMpThreads two(2);  // the route needs the threads its pool has
    const std::uint64_t calls_before = xnnpack_runtime_calls();
    const torch::Tensor logits = loaded->forward(pixels.narrow(0, 0, rows));  // [rows, 10]
    const std::uint64_t on_xnnpack = xnnpack_runtime_calls() - calls_before;
    ASSERT_EQ(logits.size(0), rows);
    EXPECT_LE((logits - expected.narrow(0, 0, rows)).abs().max().item<double>(), 0.02 * range)
        << GetParam() << " rows " << rows;
    // which engine answered: the route's first call follows the load's timing (XNNPACK's runtime where it
    // won), later ones its race; rows below min_rows never reach the batch runtime
    if (rows == 8) {
      EXPECT_EQ(on_xnnpack, engine.xnnpack ? 1u : 0u) << engine.reason;
    } else if (rows == 1) {
      EXPECT_EQ(on_xnnpack, batch1_on_xnnpack ? 1u : 0u);
    } else if (!engine.xnnpack || rows < engine.min_rows) {
      EXPECT_EQ(on_xnnpack, 0u) << rows << " rows";
    }
    EXPECT_LE(on_xnnpack, 1u);
  }

  options.run.batched_xnnpack = false;  // no bench row or server batch of that size
  EXPECT_FALSE(load_inference_model(checkpoint, options)->int8_batch_engine);
  options.run.batched_xnnpack = true;
  options.run.int8_routes = false;  // a reference (ipj export's): the int8 kernels as they are, nothing timed
  const InferenceModelPtr reference = load_inference_model(checkpoint, options);
  EXPECT_FALSE(reference->int8_batch_engine);
  EXPECT_FALSE(reference->batch1_threads);
  options.run.int8_routes = true;
  options.run.engine = "onednn";
  EXPECT_FALSE(load_inference_model(checkpoint, options)->int8_batch_engine);
  options.run.engine = "auto";
  options.run.variant = Variant::int8_dynamic;
  EXPECT_FALSE(load_inference_model(checkpoint, options)->int8_batch_engine);
}

INSTANTIATE_TEST_SUITE_P(MlpAndCnn, XnnpackInt8, ::testing::Values("mlp", "cnn"));

quant::QuantizedGraph static_int8_graph(const std::string& model) {
  const quant::Graph graph = quant::import_torchscript_file(
      testing::graph_models().file(model + "_scripted.pt"), testing::graph_model_import_options(model));
  const auto params = quant::calibrate_graph(graph, testing::fashion_subset().train, 256, 128,
                                             quant::ObserverKind::minmax, 100.0);
  return quant::QuantizedGraph::convert(graph, QuantMode::static_ptq, params, "auto");
}

class XnnpackInt8Graph : public ::testing::TestWithParam<std::string> {};

// Against the graph with its int8 weights in float (what both int8 runtimes compute but for activation
// rounding), XNNPACK is no further than LibTorch's kernels (measured: cnn_bn 0.015 both; ResNet-18 0.42 vs
// 0.49, MobileNetV2 0.59 vs 0.83: the untrained nets amplify each side's rounding, so the two differ from
// each other by up to a third of the logit range there while on cnn_bn by 0.0035).
TEST_P(XnnpackInt8Graph, IsAsCloseToTheFloatGraphAsLibTorchsInt8Kernels) {
  if (!xnnpack_runtime_available()) GTEST_SKIP() << "built without XNNPACK";
  const quant::QuantizedGraph int8 = static_int8_graph(GetParam());
  const torch::Tensor pixels = testing::test_pixels(64);  // [64, 1, 28, 28]
  const torch::Tensor libtorch = int8.forward(pixels);    // [64, 10]
  torch::NoGradGuard no_grad;
  const torch::Tensor reference = quant::run_graph(int8.dequantized_graph(), pixels);
  const double libtorch_error = (libtorch - reference).abs().max().item<double>();
  const double libtorch_mean = (libtorch - reference).abs().mean().item<double>();
  for (const std::int64_t batch : {1, 4}) {
    const std::shared_ptr<InferenceModel> runtime = xnnpack_int8_graph_runtime_model(int8, batch);
    std::vector<torch::Tensor> outputs;
    for (std::int64_t start = 0; start + batch <= pixels.size(0); start += batch)
      outputs.push_back(runtime->forward(pixels.narrow(0, start, batch)));
    const torch::Tensor logits = torch::cat(outputs);  // [64, 10]
    EXPECT_LE((logits - reference).abs().max().item<double>(), 1.25 * libtorch_error + 1e-4)
        << GetParam() << " batch " << batch;
    EXPECT_LE((logits - reference).abs().mean().item<double>(), 1.1 * libtorch_mean + 1e-4)
        << GetParam() << " batch " << batch;
    if (GetParam() == "cnn_bn") {  // a shallow net: the two runtimes agree to rounding
      EXPECT_LT((logits - libtorch).abs().max().item<double>(), 0.01 * libtorch.abs().max().item<double>());
    }
  }
  // on a pool of two: the same integers
  const torch::Tensor first = pixels.narrow(0, 0, 4);
  EXPECT_TRUE(torch::equal(xnnpack_int8_graph_runtime_model(int8, 4)->forward(first),
                           xnnpack_int8_graph_runtime_model(int8, 4, nullptr, 2)->forward(first)))
      << GetParam();
}

INSTANTIATE_TEST_SUITE_P(PythonModels, XnnpackInt8Graph,
                         ::testing::Values("cnn_bn", "resnet18", "mobilenet_v2"));

// A filter whose weights are zero (pruned, bias kept) or tiny: its weight scale is tiny and its bias at input
// x weight scale overflows int32 unless the channel's scale is raised; XNNPACK then stays as close to the
// float graph as LibTorch's kernels (which keep biases in float).
TEST(XnnpackInt8Graph, ZeroAndTinyFiltersWithBiasesStayExact) {
  if (!xnnpack_runtime_available()) GTEST_SKIP() << "built without XNNPACK";
  quant::Graph graph = quant::import_torchscript_file(testing::graph_models().file("cnn_bn_scripted.pt"),
                                                      testing::graph_model_import_options("cnn_bn"));
  bool changed = false;
  for (quant::GraphNode& node : graph.nodes) {
    if (node.kind != quant::NodeKind::conv2d || changed) continue;
    node.weight = node.weight.clone();  // [out, in, kh, kw]
    node.bias = node.bias.clone();      // [out]
    node.weight[0].zero_();
    node.bias[0] = 0.6;
    node.weight[1].mul_(1e-6);
    node.bias[1] = 0.5;
    changed = true;
  }
  ASSERT_TRUE(changed);
  const auto params = quant::calibrate_graph(graph, testing::fashion_subset().train, 128, 64,
                                             quant::ObserverKind::minmax, 100.0);
  const quant::QuantizedGraph int8 =
      quant::QuantizedGraph::convert(graph, QuantMode::static_ptq, params, "auto");
  torch::NoGradGuard no_grad;
  const torch::Tensor pixels = testing::test_pixels(16);  // [16, 1, 28, 28]
  const torch::Tensor reference = quant::run_graph(int8.dequantized_graph(), pixels);
  const double libtorch_mean = (int8.forward(pixels) - reference).abs().mean().item<double>();
  const std::shared_ptr<InferenceModel> runtime = xnnpack_int8_graph_runtime_model(int8, 1);
  std::vector<torch::Tensor> outputs;
  for (std::int64_t row = 0; row < pixels.size(0); ++row)
    outputs.push_back(runtime->forward(pixels.narrow(0, row, 1)));
  const double xnnpack_mean = (torch::cat(outputs) - reference).abs().mean().item<double>();
  EXPECT_LE(xnnpack_mean, 1.25 * libtorch_mean + 1e-4) << "LibTorch's kernels: " << libtorch_mean;
}

// What this XNNPACK has no int8 operator for is refused naming the node; loading such a model as int8-static
// keeps LibTorch's kernels at batch 1 (nothing timed), and MobileNetV2 (every node taken) times XNNPACK.
TEST(XnnpackInt8Graph, RefusesAveragePoolsAndLoadingFallsBackOrTimesIt) {
  if (!xnnpack_runtime_available()) GTEST_SKIP() << "built without XNNPACK";
  try {
    xnnpack_int8_graph_runtime_model(static_int8_graph("residual"), 1);
    FAIL() << "an int8 average pool accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::unsupported);
    EXPECT_NE(std::string(error.what()).find("node 'pool' (avg_pool2d)"), std::string::npos) << error.what();
  }
  for (const std::string model : {"residual", "mobilenet_v2"}) {
    LoadOptions options;
    options.run.variant = Variant::int8_static;
    options.run.pool_threads = 1;
    options.inputs.input_shape = {1, 28, 28};
    options.inputs.mean = {testing::kGraphModelMean};
    options.inputs.std = {testing::kGraphModelStd};
    options.calibration.samples = 128;
    const InferenceModelPtr loaded =
        load_inference_model(testing::graph_models().file(model + "_scripted.pt"), options);
    const bool timed = loaded->batch1_threads && loaded->batch1_threads->xnnpack_ms > 0.0;
    EXPECT_EQ(timed, model == "mobilenet_v2") << model << " (IPJ_LOG_LEVEL=debug says why)";
    const torch::Tensor pixels = testing::test_pixels(4);
    const torch::Tensor batched = loaded->forward(pixels);  // [4, 10]: LibTorch's kernels
    const torch::Tensor single = loaded->forward(pixels.narrow(0, 1, 1));
    EXPECT_EQ(single.sizes(), torch::IntArrayRef({1, 10}));
    if (model == "residual") {  // LibTorch's kernels at both sizes
      EXPECT_LT((single - batched.narrow(0, 1, 1)).abs().max().item<double>(), 1e-5);
    }
  }
}

}  // namespace
}  // namespace ipj::infer
