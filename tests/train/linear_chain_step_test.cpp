// The linear-chain step's kernels against LibTorch's own operators (bf16 rounding, cross-entropy and its
// gradient, the ReLU mask with its bias gradient), and its bf16 and fp32 steps against autograd training
// of the same model (autocast for bf16; short last batches and changing rates for fp32).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <vector>

#include "ipj/core/error.hpp"
#include "ipj/models/registry.hpp"
#include "ipj/train/capturable_sgd.hpp"
#include "ipj/train/linear_chain_kernels.hpp"
#include "ipj/train/linear_chain_step.hpp"
#include "ipj/train/precision.hpp"
#include "support/test_support.hpp"

namespace ipj::train {
namespace {

namespace kernels = chain_kernels;

TEST(LinearChainKernels, Bf16RoundingIsTorchs) {
  torch::manual_seed(11);
  // Random values over many magnitudes, exact ties (the kept part odd and even), specials and subnormals.
  torch::Tensor values = torch::randn({4096}) * torch::exp(torch::randn({4096}) * 20);  // [4096]
  const std::vector<float> specials = {0.0F,
                                       -0.0F,
                                       1.0F + 1.0F / 256,  // a tie: rounds to even (1.0)
                                       1.0F + 3.0F / 256,  // a tie: rounds up
                                       std::numeric_limits<float>::infinity(),
                                       -std::numeric_limits<float>::infinity(),
                                       std::numeric_limits<float>::quiet_NaN(),
                                       std::numeric_limits<float>::denorm_min(),
                                       std::numeric_limits<float>::max(),
                                       -3.0e-39F};
  values = torch::cat({values, torch::tensor(specials)});
  std::vector<kernels::Bf16Bits> ours(static_cast<std::size_t>(values.numel()));
  kernels::to_bf16(values.data_ptr<float>(), ours.data(), values.numel());
  const torch::Tensor theirs = values.to(torch::kBFloat16);
  const auto* expected = static_cast<const kernels::Bf16Bits*>(theirs.data_ptr());
  for (std::int64_t i = 0; i < values.numel(); ++i) {
    const kernels::Bf16Bits bits = ours[static_cast<std::size_t>(i)];
    if (std::isnan(values[i].item<float>()))  // any NaN (torch's vectorised cast writes 0xFFFF, c10's 0x7FC0)
      EXPECT_TRUE((bits & 0x7F80U) == 0x7F80U && (bits & 0x7FU) != 0U) << bits;
    else
      ASSERT_EQ(bits, expected[i]) << "value " << values[i].item<float>();
  }
}

TEST(LinearChainKernels, SoftmaxCrossEntropyAndItsGradientAreTorchs) {
  torch::manual_seed(12);
  const torch::Tensor logits = (torch::randn({37, 10}) * 6).requires_grad_(true);  // [37, 10]
  const torch::Tensor labels = torch::randint(0, 10, {37});                        // [37] int64
  const torch::Tensor loss = torch::nn::functional::cross_entropy(logits, labels);
  loss.backward();
  torch::Tensor grad = torch::empty({37, 10});
  torch::Tensor bias_grad = torch::empty({10});
  const double loss_sum =
      kernels::softmax_cross_entropy(logits.data_ptr<float>(), labels.data_ptr<std::int64_t>(), 37, 10,
                                     grad.data_ptr<float>(), bias_grad.data_ptr<float>());
  EXPECT_NEAR(loss_sum / 37, loss.item<double>(), 1e-5);
  EXPECT_TRUE(torch::allclose(grad, logits.grad(), 1e-5, 1e-7));
  EXPECT_TRUE(torch::allclose(bias_grad, logits.grad().sum(0), 1e-5, 1e-6));
}

TEST(LinearChainKernels, ReluBackwardMasksAndSumsColumnsInAnySplit) {
  torch::manual_seed(13);
  const torch::Tensor activation = torch::relu(torch::randn({9, 70}));  // [9, 70] a ReLU's output
  const torch::Tensor upstream = torch::randn({9, 70});                 // [9, 70]
  const torch::Tensor expected = upstream * activation.gt(0);
  torch::Tensor grad = upstream.clone();
  torch::Tensor bias_grad = torch::full({70}, 99.0F);
  for (const auto& [begin, end] : std::vector<std::pair<int, int>>{{0, 33}, {33, 64}, {64, 70}})
    kernels::relu_backward_bias_grad(grad.data_ptr<float>(), activation.data_ptr<float>(), 9, 70, begin, end,
                                     bias_grad.data_ptr<float>());
  EXPECT_TRUE(torch::equal(grad, expected));
  EXPECT_TRUE(torch::allclose(bias_grad, expected.sum(0), 1e-6, 1e-6));

  // bf16: the same on bf16 tensors (exact: masking does not round, sums are fp32).
  const torch::Tensor activation_bf16 = activation.to(torch::kBFloat16);
  torch::Tensor grad_bf16 = upstream.to(torch::kBFloat16);
  const torch::Tensor expected_bf16 = grad_bf16 * activation_bf16.gt(0);
  kernels::relu_backward_bias_grad(static_cast<kernels::Bf16Bits*>(grad_bf16.data_ptr()),
                                   static_cast<const kernels::Bf16Bits*>(activation_bf16.data_ptr()), 9, 70,
                                   0, 70, bias_grad.data_ptr<float>());
  EXPECT_TRUE(torch::equal(grad_bf16, expected_bf16));
  EXPECT_TRUE(torch::allclose(bias_grad, expected_bf16.to(torch::kFloat32).sum(0), 1e-5, 1e-5));
}

// Mlps with the same weights: `chain` trained by the linear-chain step, the references by autograd and
// torch::optim::SGD (one in fp32, one under bf16 autocast).
struct TwinMlps {
  models::ClassifierPtr chain = models::create_model("mlp", {1, 28, 28}, 10);
  models::ClassifierPtr reference = models::create_model("mlp", {1, 28, 28}, 10);
  models::ClassifierPtr autocast_reference = models::create_model("mlp", {1, 28, 28}, 10);
  torch::optim::SGD chain_optimizer{chain->parameters(), options()};
  torch::optim::SGD reference_optimizer{reference->parameters(), options()};
  torch::optim::SGD autocast_optimizer{autocast_reference->parameters(), options()};
  CapturableSgd sgd{chain_optimizer};
  std::vector<torch::Tensor> initial;

  static torch::optim::SGDOptions options() {
    return torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-4);
  }
  TwinMlps() {
    torch::NoGradGuard no_grad;
    auto from = reference->parameters();
    auto to = chain->parameters();
    auto also_to = autocast_reference->parameters();
    for (std::size_t i = 0; i < from.size(); ++i) {
      to[i].copy_(from[i]);
      also_to[i].copy_(from[i]);
      initial.push_back(from[i].clone());
    }
  }
  std::unique_ptr<TrainingStep> step(ChainPrecision precision, ChainGemms gemms = ChainGemms::best) {
    auto layers = linear_chain_layers("mlp", *chain);
    EXPECT_TRUE(layers.has_value());
    return make_linear_chain_step(std::move(*layers), sgd, precision, gemms);
  }
  // One autograd step of `model`; returns its loss.
  static double autograd_step(models::Classifier& model, torch::optim::SGD& optimizer,
                              const data::Batch& batch, double rate, Precision precision) {
    for (auto& group : optimizer.param_groups())
      group.options().set_lr(rate);
    optimizer.zero_grad();
    torch::Tensor logits;
    {
      AutocastRegion autocast(precision);
      logits = model.forward(batch.images);  // [B, 10]
    }
    const torch::Tensor loss = torch::nn::functional::cross_entropy(logits.to(torch::kFloat32), batch.labels);
    loss.backward();
    optimizer.step();
    return loss.item<double>();
  }
  double reference_step(const data::Batch& batch, double rate) {
    return autograd_step(*reference, reference_optimizer, batch, rate, Precision::fp32);
  }
  double autocast_step(const data::Batch& batch, double rate) {
    return autograd_step(*autocast_reference, autocast_optimizer, batch, rate, Precision::bf16);
  }
  // Per parameter: |model's change - the fp32 reference's change| / |the reference's change| (L2 norms).
  std::vector<double> update_errors(models::Classifier& model) const {
    std::vector<double> errors;
    auto left = model.parameters();
    auto right = reference->parameters();
    for (std::size_t i = 0; i < left.size(); ++i) {
      const torch::Tensor expected = right[i] - initial[i];
      errors.push_back(((left[i] - initial[i] - expected).norm() / expected.norm()).item<double>());
    }
    return errors;
  }
};

data::Batch random_batch(std::int64_t rows, std::uint64_t seed) {
  torch::manual_seed(seed);
  data::Batch batch;
  batch.images = torch::randn({rows, 1, 28, 28});  // [B, 1, 28, 28]
  batch.labels = torch::randint(0, 10, {rows});    // [B] int64
  return batch;
}

// Both GEMM paths: oneDNN's primitives (where built in and native here) and ATen's at::mm (OpenBLAS for
// fp32).
class LinearChainFp32 : public ::testing::TestWithParam<ChainGemms> {};
class LinearChainBf16 : public ::testing::TestWithParam<ChainGemms> {};

std::string gemms_name(const ::testing::TestParamInfo<ChainGemms>& info) {
  return info.param == ChainGemms::best ? "Best" : "Aten";
}

TEST_P(LinearChainFp32, FollowsAutogradThroughShortBatchesAndRateChanges) {
  TwinMlps twins;
  const auto step = twins.step(ChainPrecision::fp32, GetParam());
  const std::vector<std::pair<std::int64_t, double>> batches = {
      {64, 0.05}, {64, 0.05}, {23, 0.02}, {64, 0.1}};
  for (std::size_t i = 0; i < batches.size(); ++i) {
    const data::Batch batch = random_batch(batches[i].first, 20 + i);
    StepContext context;
    context.learning_rate = batches[i].second;
    const StepLoss ours = step->run(batch, context);
    const double expected_loss = twins.reference_step(batch, batches[i].second);
    EXPECT_NEAR(ours.loss.item<double>(), expected_loss, 1e-5) << "step " << i;
    EXPECT_EQ(ours.logits.size(0), batches[i].first);
  }
  for (const double error : twins.update_errors(*twins.chain))
    EXPECT_LT(error, 1e-5);
  EXPECT_DOUBLE_EQ(twins.chain_optimizer.param_groups().front().options().get_lr(),
                   0.1);  // what checkpoints save
}

INSTANTIATE_TEST_SUITE_P(Gemms, LinearChainFp32, ::testing::Values(ChainGemms::best, ChainGemms::aten),
                         gemms_name);

TEST_P(LinearChainBf16, TrainsAsCloseToFp32AsAutocastDoes) {
  if (testing::onednn_refuses_bf16())
    GTEST_SKIP() << "ONEDNN_MAX_CPU_ISA keeps oneDNN off this CPU's bf16 (scripts/test-as-avx2.sh)";
  TwinMlps twins;
  const auto step = twins.step(ChainPrecision::bf16, GetParam());
  for (int i = 0; i < 4; ++i) {
    const data::Batch batch = random_batch(128, 40 + static_cast<std::uint64_t>(i));
    StepContext context;
    context.learning_rate = 0.05;
    const StepLoss ours = step->run(batch, context);
    const double autocast_loss = twins.autocast_step(batch, 0.05);
    const double fp32_loss = twins.reference_step(batch, 0.05);
    EXPECT_NEAR(ours.loss.item<double>(), fp32_loss, 0.02 * fp32_loss) << "step " << i;
    EXPECT_NEAR(autocast_loss, fp32_loss, 0.02 * fp32_loss) << "step " << i;
  }
  // bf16 rounds activations and gradients (~3 significant digits): both bf16 runs leave the fp32 updates by a
  // few percent; the linear-chain step by no more than autocast does (it sums bias gradients in fp32).
  const std::vector<double> ours = twins.update_errors(*twins.chain);
  const std::vector<double> autocast = twins.update_errors(*twins.autocast_reference);
  for (std::size_t i = 0; i < ours.size(); ++i) {
    EXPECT_LT(ours[i], 1.25 * autocast[i] + 1e-3) << "parameter " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Gemms, LinearChainBf16, ::testing::Values(ChainGemms::best, ChainGemms::aten),
                         gemms_name);

TEST(LinearChainStep, RefusesALabelOutsideTheClassesAndABatchOfTheWrongSizeBeforeTouchingAWeight) {
  TwinMlps twins;
  const auto step = twins.step(ChainPrecision::fp32);
  StepContext context;
  context.learning_rate = 0.05;
  data::Batch bad_label = random_batch(8, 60);
  bad_label.labels[5] = 10;  // classes are 0..9
  data::Batch wrong_size = random_batch(8, 61);
  wrong_size.images = torch::randn({8, 1, 28, 27});  // [8, 756]: the first layer takes 784
  for (const auto& [batch, message] : std::vector<std::pair<data::Batch, std::string>>{
           {bad_label, "label 10 outside [0, 10)"}, {wrong_size, "must hold 6272 fp32 values, got 6048"}}) {
    try {
      step->run(batch, context);
      ADD_FAILURE() << "accepted: " << message;
    } catch (const Error& error) {
      EXPECT_EQ(error.category(), ErrorCategory::invalid_input);
      EXPECT_NE(std::string(error.what()).find(message), std::string::npos) << error.what();
    }
  }
  // No weight moved.
  auto parameters = twins.chain->parameters();
  for (std::size_t i = 0; i < parameters.size(); ++i)
    EXPECT_TRUE(torch::equal(parameters[i], twins.initial[i])) << "parameter " << i;
  // And the step still trains after the refusals.
  const StepLoss loss = step->run(random_batch(8, 62), context);
  EXPECT_TRUE(std::isfinite(loss.loss.item<double>()));
}

TEST(LinearChainStep, OnlyStraightLinearChainsQualify) {
  auto cnn = models::create_model("cnn", {1, 28, 28}, 10);
  EXPECT_FALSE(linear_chain_layers("cnn", *cnn).has_value());
  auto mlp = models::create_model("mlp", {1, 28, 28}, 10);
  const auto layers = linear_chain_layers("mlp", *mlp);
  ASSERT_TRUE(layers.has_value());
  ASSERT_EQ(layers->size(), 3u);
  EXPECT_TRUE((*layers)[0].relu);
  EXPECT_TRUE((*layers)[1].relu);
  EXPECT_FALSE((*layers)[2].relu);
  EXPECT_TRUE((*layers)[0].weight.is_same(mlp->named_parameters()["fc1.weight"]));
}

}  // namespace
}  // namespace ipj::train
