// int8 quantization on real Fashion-MNIST subsets: folding exactness, int8 vs fp32 closeness (dynamic,
// static, QAT), the save/load round trip, observer arithmetic and the accuracy guard.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>

#include "inference_fixture.hpp"
#include "ipj/core/error.hpp"
#include "ipj/models/registry.hpp"
#include "ipj/quant/quantize.hpp"
#include "ipj/train/checkpoint.hpp"
#include "ipj/train/evaluate.hpp"

namespace ipj::quant {
namespace {

using testing::trained_checkpoint;

using testing::test_pixels;

torch::Tensor classifier_logits(const train::TrainedModel& trained, const torch::Tensor& pixels) {
  torch::NoGradGuard no_grad;
  const auto mean = trained.state.model_info["mean"].get<std::vector<float>>();
  const auto std = trained.state.model_info["std"].get<std::vector<float>>();
  return trained.model->forward((pixels - mean[0]) / std[0]);
}

double agreement(const torch::Tensor& a, const torch::Tensor& b) {
  return a.argmax(1).eq(b.argmax(1)).to(torch::kDouble).mean().item<double>();
}

class QuantModels : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantModels, FoldedProgramMatchesTheClassifier) {
  const train::TrainedModel trained = train::load_trained_model(trained_checkpoint(GetParam()));
  const LayerProgram program = extract_program(*trained.model, trained.state.model_info);
  const torch::Tensor pixels = test_pixels(64);
  torch::NoGradGuard no_grad;
  const torch::Tensor expected = classifier_logits(trained, pixels);  // [64, 10]
  const torch::Tensor folded = run_float(program, pixels);
  EXPECT_LT((expected - folded).abs().max().item<double>(), 1e-3 * (1 + expected.abs().max().item<double>()));
}

TEST_P(QuantModels, DynamicAndStaticInt8StayCloseToFp32) {
  const train::TrainedModel trained = train::load_trained_model(trained_checkpoint(GetParam()));
  const LayerProgram program = extract_program(*trained.model, trained.state.model_info);
  const torch::Tensor pixels = test_pixels(1000);
  torch::NoGradGuard no_grad;
  const torch::Tensor reference = run_float(program, pixels);
  const double range = (reference.max() - reference.min()).item<double>();

  const QuantizedProgram dynamic = QuantizedProgram::convert(program, QuantMode::dynamic, {}, "auto");
  const torch::Tensor dynamic_logits = dynamic.forward(pixels);
  // Dynamic int8 quantizes each batch's activations with one scale: a rare logit is off by ~5% of the range
  // (1.12 of 21 on a Zen 4 VM with oneDNN's VNNI kernels), the typical one by far less.
  const torch::Tensor dynamic_error = (dynamic_logits - reference).abs();
  EXPECT_LT(dynamic_error.max().item<double>(), 0.08 * range);
  EXPECT_LT(dynamic_error.mean().item<double>(), 0.01 * range);
  EXPECT_GT(agreement(dynamic_logits, reference), 0.97);

  const auto params =
      calibrate(program, testing::fashion_subset().train, 1000, 128, ObserverKind::minmax, 100.0);
  const QuantizedProgram static_int8 =
      QuantizedProgram::convert(program, QuantMode::static_ptq, params, "auto");
  const torch::Tensor static_logits = static_int8.forward(pixels);
  EXPECT_LT((static_logits - reference).abs().max().item<double>(), 0.10 * range);
  EXPECT_GT(agreement(static_logits, reference), 0.95);

  // random inputs in [0, 1] too (not only images like the calibration set)
  torch::manual_seed(3);
  const torch::Tensor noise = torch::rand({64, 1, 28, 28});
  const torch::Tensor noise_reference = run_float(program, noise);
  const double noise_range = (noise_reference.max() - noise_reference.min()).item<double>();
  EXPECT_LT((dynamic.forward(noise) - noise_reference).abs().max().item<double>(), 0.05 * noise_range);

  // int8 weights: about a quarter of the float bytes
  EXPECT_LT(static_int8.parameter_bytes() * 3.5, float_parameter_bytes(program));
}

TEST_P(QuantModels, Int8FileRoundTripsExactly) {
  testing::TempDir dir;
  const train::TrainedModel trained = train::load_trained_model(trained_checkpoint(GetParam()));
  const LayerProgram program = extract_program(*trained.model, trained.state.model_info);
  const auto params =
      calibrate(program, testing::fashion_subset().train, 500, 128, ObserverKind::percentile, 99.9);
  const QuantizedProgram original = QuantizedProgram::convert(program, QuantMode::static_ptq, params, "auto");
  original.save(dir.file("int8.pt"), {{"note", "test"}});
  ASSERT_TRUE(QuantizedProgram::is_int8_file(dir.file("int8.pt")));
  EXPECT_FALSE(QuantizedProgram::is_int8_file(trained.path));
  const QuantizedProgram loaded = QuantizedProgram::load(dir.file("int8.pt"));
  const torch::Tensor pixels = test_pixels(32);
  EXPECT_TRUE(torch::equal(original.forward(pixels), loaded.forward(pixels)));
  EXPECT_EQ(loaded.extra()["note"], "test");
  EXPECT_EQ(loaded.parameter_bytes(), original.parameter_bytes());
}

INSTANTIATE_TEST_SUITE_P(MlpAndCnn, QuantModels, ::testing::Values("mlp", "cnn"));

TEST(QuantObservers, AffineParamsArithmetic) {
  const QuantParams params = affine_params(-1.0, 3.0);
  EXPECT_DOUBLE_EQ(params.scale, 4.0 / 255.0);
  EXPECT_EQ(params.zero_point, 64);                       // round(1 / (4/255)) = round(63.75)
  const QuantParams positive = affine_params(0.5, 2.55);  // widened to include 0
  EXPECT_DOUBLE_EQ(positive.scale, 0.01);
  EXPECT_EQ(positive.zero_point, 0);
}

TEST(QuantObservers, MinMaxTracksExtremesAndPercentileClipsOutliers) {
  ActivationObserver minmax(ObserverKind::minmax);
  ActivationObserver percentile(ObserverKind::percentile, 99.0);
  torch::Tensor values = torch::linspace(0.0, 1.0, 10001);
  values[5000] = 100.0;  // one outlier
  minmax.observe(values);
  percentile.observe(values);
  EXPECT_DOUBLE_EQ(minmax.max_value(), 100.0);
  EXPECT_NEAR(minmax.quant_params().scale, 100.0 / 255.0, 1e-9);
  EXPECT_NEAR(percentile.quant_params().scale * 255.0, 0.99, 0.01);  // the outlier is clipped
  EXPECT_THROW(ActivationObserver(ObserverKind::percentile, 20.0), Error);
  EXPECT_THROW(parse_observer_kind("histogramm"), Error);
}

TEST(QuantWorkflow, GuardRefusesABrokenCalibrationAndWritesNothing) {
  testing::TempDir dir;
  QuantizeOptions options;
  options.model_path = trained_checkpoint("mlp");
  options.out_path = dir.file("broken.pt");
  options.mode = QuantMode::static_ptq;
  options.observer = ObserverKind::percentile;
  options.percentile = 50.5;  // clips half of every activation range: a deliberately broken calibration
  options.calib_samples = 200;
  options.test_limit = 1000;
  options.show_progress = false;
  const QuantizeResult result = run_quantize(options);
  EXPECT_FALSE(result.accepted);
  EXPECT_FALSE(result.written);
  EXPECT_GT(result.acc_drop_pt, 0.5);
  EXPECT_FALSE(std::filesystem::exists(options.out_path));

  options.observer = ObserverKind::minmax;
  options.out_path = dir.file("good.pt");
  options.max_drop_pt = 1.0;
  const QuantizeResult good = run_quantize(options);
  EXPECT_TRUE(good.accepted) << good.acc_drop_pt;
  EXPECT_TRUE(std::filesystem::exists(options.out_path));
  EXPECT_EQ(good.report["fp32_bytes"], good.fp32_bytes);
}

TEST(QuantWorkflow, QatFineTunesAndConverts) {
  testing::TempDir dir;
  QuantizeOptions options;
  options.model_path = trained_checkpoint("mlp");
  options.out_path = dir.file("qat.pt");
  options.mode = QuantMode::qat;
  options.qat_epochs = 1;
  options.train_limit = 6000;  // fine-tuning a trained model: a tenth of the set shows it (and takes a tenth)
  options.test_limit = 1000;
  options.show_progress = false;
  const QuantizeResult result = run_quantize(options);
  EXPECT_TRUE(result.accepted) << result.acc_drop_pt;
  EXPECT_GT(result.int8_acc, 0.7);
  const QuantizedProgram loaded = QuantizedProgram::load(options.out_path);
  EXPECT_EQ(loaded.mode(), QuantMode::qat);
}

TEST(QuantWorkflow, ResidualModelsAndMissingEnginesAreRefusedClearly) {
  auto resnet = models::create_model("resnet18", models::InputShape{1, 28, 28}, 10);
  const Json info = {{"name", "resnet18"},
                     {"input_shape", {1, 28, 28}},
                     {"num_classes", 10},
                     {"mean", {0.3}},
                     {"std", {0.3}}};
  try {
    extract_program(*resnet, info);
    FAIL() << "resnet18 was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::unsupported);
  }
  // Every engine either is in this build and gets selected, or is refused naming what the build has (Debian's
  // LibTorch: onednn and qnnpack, no fbgemm); a name no build has is always refused.
  const auto engines = available_quantized_engines();
  ASSERT_FALSE(engines.empty());
  for (const std::string name : {"onednn", "fbgemm", "qnnpack", "no-such-engine"}) {
    if (std::find(engines.begin(), engines.end(), name) != engines.end()) {
      EXPECT_EQ(select_quantized_engine(name), name);
      continue;
    }
    try {
      select_quantized_engine(name);
      FAIL() << name << " accepted without being built";
    } catch (const Error& error) {
      EXPECT_EQ(error.category(), ErrorCategory::unsupported);
      EXPECT_NE(std::string(error.what()).find(engines.front()), std::string::npos) << error.what();
    }
  }
  select_quantized_engine("auto");
}

}  // namespace
}  // namespace ipj::quant
