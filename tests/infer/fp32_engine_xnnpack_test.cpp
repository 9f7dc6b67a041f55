// The fp32 engine's XNNPACK forms: LibTorch's XNNPACK graph and ipj's XNNPACK runtime, forced or timed
// against the engine chosen, at batch 1 and in a batch; never where it would answer otherwise than eager
// (wide inputs, NaNs, a model XNNPACK's graph computes differently).
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <limits>
#include <thread>

#include "depthwise_model.hpp"
#include "inference_fixture.hpp"
#include "ipj/core/error.hpp"
#include "ipj/core/torch_compat.hpp"
#include "ipj/device/machine_load.hpp"
#include "ipj/device/threading.hpp"
#include "ipj/infer/fp32_engine.hpp"
#include "ipj/infer/inference_model.hpp"
#include "ipj/infer/onednn_runtime.hpp"
#include "ipj/infer/script_program.hpp"
#include "ipj/infer/xnnpack_runtime.hpp"
#include "ipj/quant/quantized_program.hpp"
#include "support/test_support.hpp"
#include "support/user_models.hpp"

namespace ipj::infer {
namespace {

// --fp32-engine xnnpack where LibTorch's XNNPACK graph differs from eager (BatchNorm folded into a
// convolution used twice): eager for other shapes, yet batch 1 and the batch size on XNNPACK's runtime of
// ipj's graph IR, which is exact (a hostile pass, 12-07: everything ran eager).
TEST(Fp32Engine, ForcedXnnpackKeepsItsRuntimeWhereLibTorchsXnnpackGraphDiffers) {
  testing::TempDir dir;
  const auto made = testing::make_user_models(dir.path(), {"shared_conv_bn_scripted"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const std::string path = dir.file("shared_conv_bn_scripted.pt");
  LoadOptions options;
  options.inputs.input_shape = {3, 32, 32};
  options.run.fp32_engine = Fp32Engine::xnnpack;
  options.run.fp32_engine_batch = 8;
  const InferenceModelPtr model = load_inference_model(path, options);
  ASSERT_TRUE(model->fp32_engine);
  const Fp32EngineChoice& choice = *model->fp32_engine;
  if (!xnnpack_runtime_available()) GTEST_SKIP() << "built without XNNPACK: " << choice.reason;
  EXPECT_EQ(choice.engine, Fp32Engine::eager) << choice.reason;  // LibTorch's XNNPACK graph differed
  EXPECT_NE(choice.reason.find("differs from eager by"), std::string::npos) << choice.reason;
  EXPECT_EQ(choice.batch1_engine, Fp32Engine::xnnpack) << choice.reason;
  EXPECT_EQ(choice.batch1_xnnpack_form, XnnpackForm::runtime) << choice.reason;
  EXPECT_EQ(choice.batch_engine, Fp32Engine::xnnpack) << choice.reason;
  torch::jit::Module reference = torch::jit::load(path);
  reference.eval();
  torch::NoGradGuard no_grad;
  const torch::Tensor pixels = torch::rand({8, 3, 32, 32});
  for (const std::int64_t rows : {1, 5, 8}) {
    const torch::Tensor input = pixels.narrow(0, 0, rows);
    const torch::Tensor expected = reference.forward({input}).toTensor();
    EXPECT_LT((model->forward(input) - expected).abs().max().item<double>(), 1e-4) << rows << " rows";
  }
}

// XNNPACK's graph (optimizeForMobile) computes what eager does, at batch 1 and in a batch; a model with
// nothing XNNPACK takes is refused with the reason; the switch that keeps XNNPACK on the calling thread is
// set for one scope only.
TEST(Fp32Engine, XnnpackGraphAgreesWithEagerAndRefusesWhatItCannotTake) {
  torch::jit::Module eager = depthwise_module();
  torch::jit::Module xnnpack = freeze_for_inference(eager, Freezing::xnnpack);
  const std::string graph = xnnpack.get_method("forward").graph()->toString();
  EXPECT_NE(graph.find("prepacked::conv2d_clamp_run"), std::string::npos) << graph;
  EXPECT_NE(graph.find("prepacked::linear_clamp_run"), std::string::npos) << graph;
  torch::NoGradGuard no_grad;
  for (const std::int64_t batch : {1, 3}) {
    const torch::Tensor x = torch::rand({batch, 1, 12, 12});
    const torch::Tensor expected = eager.forward({x}).toTensor();
    torch::Tensor got;
    {
      const compat::XnnpackOnCallingThread no_pthreadpool;
      EXPECT_TRUE(caffe2::_NoPThreadPoolGuard::is_enabled());
      got = xnnpack.forward({x}).toTensor();
    }
    EXPECT_FALSE(caffe2::_NoPThreadPoolGuard::is_enabled());
    ASSERT_EQ(got.sizes(), expected.sizes());
    EXPECT_LT((got - expected).abs().max().item<double>(), 1e-4) << "batch " << batch;
  }
  torch::jit::Module elementwise("Elementwise");
  elementwise.define("def forward(self, x: Tensor) -> Tensor:\n    return x * 2.0 + 1.0\n");
  elementwise.eval();
  try {
    freeze_for_inference(elementwise, Freezing::xnnpack);
    ADD_FAILURE() << "an XNNPACK graph without XNNPACK operators was built";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::unsupported);
    EXPECT_NE(std::string(error.what()).find("no XNNPACK operator"), std::string::npos) << error.what();
  }
}

// Through the loader: --fp32-engine xnnpack runs (checked against eager) every batch on XNNPACK; auto times
// XNNPACK at batch 1 against the engine it chose and records it; either way a sample's answer at batch 1 is
// its answer inside a batch.
TEST(Fp32Engine, XnnpackIsForcedOrTimedForBatch1AndAnswersAsInABatch) {
  testing::TempDir dir;
  depthwise_module().save(dir.file("depthwise.pt"));
  torch::jit::Module reference = torch::jit::load(dir.file("depthwise.pt"));
  reference.eval();
  const torch::Tensor pixels = torch::rand({5, 1, 12, 12});
  torch::NoGradGuard no_grad;
  const torch::Tensor expected = reference.forward({pixels}).toTensor();  // [5, 4]
  LoadOptions options = depthwise_options(Fp32Engine::xnnpack, 8);
  const InferenceModelPtr forced = load_inference_model(dir.file("depthwise.pt"), options);
  ASSERT_TRUE(forced->fp32_engine);
  EXPECT_EQ(forced->fp32_engine->engine, Fp32Engine::xnnpack) << forced->fp32_engine->reason;
  EXPECT_NE(forced->fp32_engine->reason.find("xnnpack, as asked, checked"), std::string::npos)
      << forced->fp32_engine->reason;
  // The graph importer takes this model: batch 1 runs on XNNPACK's runtime of it (ipj's graph IR as one
  // XNNPACK plan), checked like the operators' graph.
  if (xnnpack_runtime_available()) {
    EXPECT_EQ(forced->fp32_engine->batch1_xnnpack_form, XnnpackForm::runtime) << forced->fp32_engine->reason;
    EXPECT_NE(forced->fp32_engine->reason.find("; batch 1 on XNNPACK runtime (within "), std::string::npos)
        << forced->fp32_engine->reason;
  }
  EXPECT_LT((forced->forward(pixels) - expected).abs().max().item<double>(), 1e-4);
  options.run.fp32_engine = Fp32Engine::auto_select;
  const InferenceModelPtr chosen = load_inference_model(dir.file("depthwise.pt"), options);
  ASSERT_TRUE(chosen->fp32_engine);
  const Fp32EngineChoice& choice = *chosen->fp32_engine;
  ASSERT_EQ(choice.measured.size(), 3u) << choice.reason;
  EXPECT_EQ(choice.measured[2].engine, Fp32Engine::xnnpack);
  EXPECT_TRUE(choice.measured[2].exact) << choice.reason;
  EXPECT_GT(choice.batch1_xnnpack_ms, 0.0);
  EXPECT_EQ(choice.batch1_xnnpack_ms, choice.measured[2].batch1_ms);
  if (choice.batch1_engine == Fp32Engine::xnnpack) {
    EXPECT_NE(choice.reason.find("batch 1 on XNNPACK runtime: "), std::string::npos) << choice.reason;
    EXPECT_EQ(choice.batch1_xnnpack_form, XnnpackForm::runtime);
    EXPECT_EQ(choice.batch1_threads, 1);
  } else if (choice.batch1_engine == Fp32Engine::onednn) {  // timed beside XNNPACK's runtime, 10% faster
    EXPECT_NE(choice.reason.find("batch 1 on oneDNN runtime: "), std::string::npos) << choice.reason;
    EXPECT_LE(choice.batch1_onednn_ms, 0.9 * choice.batch1_xnnpack_ms) << choice.reason;
    EXPECT_EQ(choice.batch1_threads, 1);
  } else {
    EXPECT_EQ(choice.batch1_engine, choice.engine) << choice.reason;
  }
  // oneDNN's runtime of the graph is timed beside XNNPACK's at batch 1 where this build has both
  if (onednn_runtime_available() && choice.batch1_xnnpack_form == XnnpackForm::runtime) {
    EXPECT_GT(choice.batch1_onednn_ms, 0.0) << choice.reason;
  }
  EXPECT_EQ(to_json(choice)["batch1_engine"], choice_name(choice.batch1_engine));
  EXPECT_EQ(to_json(choice)["batch1_onednn_ms"], choice.batch1_onednn_ms);
  EXPECT_LT((chosen->forward(pixels) - expected).abs().max().item<double>(), 1e-4);
  // Another spatial size than the one checked (the pooling takes any) runs on eager, never on XNNPACK's
  // operators, which do not check sizes: the forced engine and auto's batch-1 route alike.
  const torch::Tensor larger = torch::rand({1, 1, 16, 16});
  const torch::Tensor larger_expected = reference.forward({larger}).toTensor();
  EXPECT_LT((forced->forward(larger) - larger_expected).abs().max().item<double>(), 1e-5);
  EXPECT_LT((chosen->forward(larger) - larger_expected).abs().max().item<double>(), 1e-4);
  for (std::int64_t row = 0; row < 5; ++row)
    EXPECT_LT(
        (chosen->forward(pixels.narrow(0, row, 1)) - expected.narrow(0, row, 1)).abs().max().item<double>(),
        1e-4)
        << "row " << row;
}

// What a [0, 1) pixel check cannot see: sqrt of a negative input is NaN in eager, and XNNPACK's fused clamp
// turns it into a number. The normal(0, 2) probe sees it: auto keeps XNNPACK out, --fp32-engine xnnpack runs
// eager with a warning. A forced XNNPACK graph that cannot be checked (the model fails on the input shape)
// is refused: its operators would read past a smaller input. The graph importer's refusal is said once.
TEST(Fp32Engine, XnnpackThatDiffersOnWideInputsOrCannotBeCheckedNeverRuns) {
  testing::TempDir dir;
  depthwise_module("x = torch.sqrt(x)").save(dir.file("sqrt.pt"));
  LoadOptions options = depthwise_options(Fp32Engine::auto_select, 4);
  const InferenceModelPtr chosen = load_inference_model(dir.file("sqrt.pt"), options);
  ASSERT_TRUE(chosen->fp32_engine);
  EXPECT_NE(chosen->fp32_engine->batch1_engine, Fp32Engine::xnnpack) << chosen->fp32_engine->reason;
  EXPECT_NE(chosen->fp32_engine->reason.find("XNNPACK operators not used: differs from eager by inf"),
            std::string::npos)
      << chosen->fp32_engine->reason;
  // The graph importer refuses sqrt: every runtime tried meets that refusal, and the reason says it once.
  const std::string& reason = chosen->fp32_engine->reason;
  const std::size_t refusal = reason.find("aten::sqrt");
  ASSERT_NE(refusal, std::string::npos) << reason;
  EXPECT_EQ(reason.find("aten::sqrt", refusal + 1), std::string::npos) << reason;
  EXPECT_NE(reason.find("the same as above"), std::string::npos) << reason;
  const torch::Tensor negative = torch::full({1, 1, 12, 12}, -0.5);
  EXPECT_TRUE(chosen->forward(negative).isnan().any().item<bool>());  // as eager answers
  options.run.fp32_engine = Fp32Engine::xnnpack;
  const InferenceModelPtr forced = load_inference_model(dir.file("sqrt.pt"), options);
  EXPECT_EQ(forced->fp32_engine->engine, Fp32Engine::eager) << forced->fp32_engine->reason;
  EXPECT_TRUE(forced->forward(negative).isnan().any().item<bool>());
  options.inputs.input_shape = {2, 12, 12};  // the stem takes one channel
  try {
    load_inference_model(dir.file("sqrt.pt"), options);
    ADD_FAILURE() << "an unchecked XNNPACK graph was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::usage);
    EXPECT_NE(std::string(error.what()).find("runs only once checked against eager"), std::string::npos)
        << error.what();
  }
}

// XNNPACK's fused clamps turn a NaN into a number (ReLU(NaN) = 0): a batch-1 input holding a non-finite or
// huge value runs on the engine that answers as eager, forced or timed; on one usable CPU XNNPACK is still
// timed against the chosen engine.
TEST(Fp32Engine, Batch1InputsXnnpackWouldHideNaNsOfRunAsEagerAndOneCpuStillTimesIt) {
  testing::TempDir dir;
  depthwise_module().save(dir.file("depthwise.pt"));
  LoadOptions options = depthwise_options(Fp32Engine::xnnpack, 4);
  const InferenceModelPtr forced = load_inference_model(dir.file("depthwise.pt"), options);
  torch::NoGradGuard no_grad;
  torch::Tensor with_nan = torch::rand({1, 1, 12, 12});
  with_nan[0][0][5][5] = NAN;
  EXPECT_TRUE(
      forced->forward(with_nan).isnan().any().item<bool>());  // eager: the NaN spreads through the clamp
  const torch::Tensor huge = torch::full({1, 1, 12, 12}, 3e38);
  torch::jit::Module reference = torch::jit::load(dir.file("depthwise.pt"));
  reference.eval();
  const torch::Tensor expected = reference.forward({huge}).toTensor();
  const torch::Tensor got = forced->forward(huge);
  EXPECT_TRUE(got.isnan().equal(expected.isnan())) << got << expected;
  options.run.fp32_engine = Fp32Engine::auto_select;
  options.run.pool_threads = 1;  // --threads 1: one CPU's worth, no pool to time against
  const InferenceModelPtr chosen = load_inference_model(dir.file("depthwise.pt"), options);
  ASSERT_TRUE(chosen->fp32_engine);
  EXPECT_GT(chosen->fp32_engine->batch1_xnnpack_ms, 0.0) << chosen->fp32_engine->reason;
  EXPECT_NE(chosen->fp32_engine->batch1_xnnpack_form, XnnpackForm::none) << chosen->fp32_engine->reason;
  EXPECT_TRUE(chosen->forward(with_nan).isnan().any().item<bool>());
}

}  // namespace
}  // namespace ipj::infer
