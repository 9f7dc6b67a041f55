// XNNPACK's int8 runtime of a static int8 program against LibTorch's int8 kernels (QuantizedProgram::forward)
// on the trained mlp and cnn: the same logits up to requantization rounding, the same classes, batch 1 and
// a larger batch, input padding, and the refusal of dynamic int8.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "inference_fixture.hpp"
#include "ipj/core/error.hpp"
#include "ipj/infer/xnnpack_runtime.hpp"
#include "ipj/quant/quantize.hpp"
#include "ipj/train/checkpoint.hpp"

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

INSTANTIATE_TEST_SUITE_P(MlpAndCnn, XnnpackInt8, ::testing::Values("mlp", "cnn"));

}  // namespace
}  // namespace ipj::infer
