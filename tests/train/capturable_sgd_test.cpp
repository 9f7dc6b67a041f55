// CapturableSgd against torch::optim::SGD: the same updates (momentum, weight decay, changing rates), and the
// momentum state shared so that the ordinary optimizer continues where the capturable one stopped.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "ipj/core/error.hpp"
#include "ipj/train/capturable_sgd.hpp"

namespace ipj::train {
namespace {

// A small model with a bias-free layer and a parameter that never gets a gradient.
struct TwoLayer : torch::nn::Module {
  TwoLayer() {
    first = register_module("first", torch::nn::Linear(6, 5));
    second = register_module("second", torch::nn::Linear(torch::nn::LinearOptions(5, 3).bias(false)));
    unused = register_parameter("unused", torch::ones({2}));
  }
  torch::Tensor forward(const torch::Tensor& x) { return second(torch::tanh(first(x))); }  // x: [B, 6]
  torch::nn::Linear first{nullptr}, second{nullptr};
  torch::Tensor unused;
};

void compute_gradients(TwoLayer& model, int step) {
  torch::manual_seed(100 + step);
  const torch::Tensor inputs = torch::randn({8, 6});       // [8, 6]
  const torch::Tensor labels = torch::randint(0, 3, {8});  // [8]
  for (auto& parameter : model.parameters())
    if (parameter.grad().defined()) parameter.mutable_grad().zero_();
  torch::nn::functional::cross_entropy(model.forward(inputs), labels).backward();
}

void copy_parameters(TwoLayer& from, TwoLayer& to) {
  torch::NoGradGuard no_grad;
  auto source = from.parameters();
  auto target = to.parameters();
  for (std::size_t i = 0; i < source.size(); ++i)
    target[i].copy_(source[i]);
}

void expect_same_parameters(TwoLayer& a, TwoLayer& b, double tolerance) {
  auto left = a.parameters();
  auto right = b.parameters();
  ASSERT_EQ(left.size(), right.size());
  for (std::size_t i = 0; i < left.size(); ++i)
    EXPECT_LT((left[i] - right[i]).abs().max().item<double>(), tolerance) << "parameter " << i;
}

struct Case {
  double momentum;
  double weight_decay;
};

class CapturableSgdTest : public ::testing::TestWithParam<Case> {};

TEST_P(CapturableSgdTest, MatchesTorchSgdWithChangingRates) {
  const Case setting = GetParam();
  torch::manual_seed(7);
  TwoLayer reference_model, capturable_model;
  copy_parameters(reference_model, capturable_model);
  auto options = [&] {
    return torch::optim::SGDOptions(0.1).momentum(setting.momentum).weight_decay(setting.weight_decay);
  };
  torch::optim::SGD reference(reference_model.parameters(), options());
  torch::optim::SGD holder(capturable_model.parameters(), options());
  CapturableSgd capturable(holder);
  const double rates[] = {0.1, 0.1, 0.05, 0.2, 0.01, 0.3};
  int step = 0;
  for (double rate : rates) {
    for (auto& group : reference.param_groups())
      group.options().set_lr(rate);
    capturable.set_learning_rate(rate);
    compute_gradients(reference_model, step);
    compute_gradients(capturable_model, step);
    reference.step();
    capturable.step();
    ++step;
  }
  expect_same_parameters(reference_model, capturable_model, 1e-6);
  // The parameter without a gradient is untouched (weight decay applies only to parameters that have one).
  EXPECT_TRUE(torch::equal(capturable_model.unused, torch::ones({2})));
  EXPECT_DOUBLE_EQ(capturable.learning_rate_tensor().item<double>(), static_cast<float>(0.3));
  EXPECT_DOUBLE_EQ(holder.param_groups().front().options().get_lr(), 0.3);
}

INSTANTIATE_TEST_SUITE_P(Settings, CapturableSgdTest,
                         ::testing::Values(Case{0.9, 0.0}, Case{0.9, 5e-4}, Case{0.0, 0.0}, Case{0.0, 1e-3}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.momentum != 0.0 ? "Momentum" : "Plain") +
                                  (info.param.weight_decay != 0.0 ? "WithWeightDecay" : "");
                         });

TEST(CapturableSgd, SharesMomentumStateWithTheTorchOptimizer) {
  // Two steps with CapturableSgd and then two with the torch optimizer must equal four torch steps: this
  // fails if the momentum buffers were not the optimizer's own (torch would start a fresh buffer at step
  // three).
  torch::manual_seed(3);
  TwoLayer reference_model, mixed_model;
  copy_parameters(reference_model, mixed_model);
  auto options = [] { return torch::optim::SGDOptions(0.05).momentum(0.9); };
  torch::optim::SGD reference(reference_model.parameters(), options());
  torch::optim::SGD mixed(mixed_model.parameters(), options());
  {
    CapturableSgd capturable(mixed);
    for (int step = 0; step < 2; ++step) {
      compute_gradients(mixed_model, step);
      capturable.step();
    }
  }
  for (int step = 2; step < 4; ++step) {
    compute_gradients(mixed_model, step);
    mixed.step();
  }
  for (int step = 0; step < 4; ++step) {
    compute_gradients(reference_model, step);
    reference.step();
  }
  expect_same_parameters(reference_model, mixed_model, 1e-6);

  // One state entry per parameter, all made by CapturableSgd: had its keys differed from torch's, torch would
  // have added three more entries of its own.
  EXPECT_EQ(mixed.state().size(), 4u);
}

TEST(CapturableSgd, RefusesNesterov) {
  TwoLayer model;
  torch::optim::SGD optimizer(model.parameters(), torch::optim::SGDOptions(0.1).momentum(0.9).nesterov(true));
  EXPECT_THROW(CapturableSgd{optimizer}, Error);
}

}  // namespace
}  // namespace ipj::train
