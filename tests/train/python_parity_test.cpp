// Numeric parity with PyTorch: one forward/backward and two SGD-momentum steps of ipj's mlp and cnn against
// Debian's python3-torch on the same weights and batch (golden values produced at test time).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>

#include "ipj/core/atomic_file.hpp"
#include "ipj/core/json_io.hpp"
#include "ipj/models/registry.hpp"
#include "ipj/train/capturable_sgd.hpp"
#include "ipj/train/linear_chain_step.hpp"
#include "support/test_support.hpp"

namespace ipj::train {
namespace {

void write_tensor(const std::string& path, const torch::Tensor& tensor) {
  const torch::Tensor contiguous = tensor.detach().to(torch::kFloat32).contiguous();
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(contiguous.data_ptr<float>()),
            static_cast<std::streamsize>(contiguous.numel() * sizeof(float)));
}

torch::Tensor read_tensor(const std::string& path, at::IntArrayRef shape) {
  const std::string bytes = read_file(path);
  torch::Tensor tensor = torch::empty(shape, torch::kFloat32);
  EXPECT_EQ(bytes.size(), static_cast<size_t>(tensor.numel()) * sizeof(float)) << path;
  std::memcpy(tensor.data_ptr<float>(), bytes.data(), std::min(bytes.size(), tensor.numel() * sizeof(float)));
  return tensor;
}

// The model's parameters and floating-point buffers (what reference_step.py reads and writes).
torch::OrderedDict<std::string, torch::Tensor> parameters_and_buffers(models::Classifier& model) {
  auto state = model.named_parameters();
  for (const auto& buffer : model.named_buffers()) {
    if (buffer.value().is_floating_point()) state.insert(buffer.key(), buffer.value());
  }
  return state;
}

void expect_close(const torch::Tensor& actual, const torch::Tensor& expected, const std::string& what) {
  const double scale = std::max(1.0, expected.abs().max().item<double>());
  const double difference = (actual - expected).abs().max().item<double>();
  EXPECT_LT(difference, 2e-5 * scale) << what << ": max |ipj - pytorch| = " << difference;
}

// The golden files of reference_step.py for `model`'s current weights and the batch (x, labels).
void write_reference(const testing::TempDir& dir, const std::string& model_name, models::Classifier& model,
                     const torch::Tensor& x, const torch::Tensor& labels) {
  Json manifest{{"input_shape", x.sizes().vec()},
                {"labels", std::vector<std::int64_t>(labels.data_ptr<std::int64_t>(),
                                                     labels.data_ptr<std::int64_t>() + labels.numel())},
                {"state", Json::object()}};
  for (const auto& item : parameters_and_buffers(model)) {
    manifest["state"][item.key()] = item.value().sizes().vec();
    write_tensor(dir.file("in." + item.key() + ".bin"), item.value());
  }
  write_tensor(dir.file("input.bin"), x);
  write_json_file(dir.file("manifest.json"), manifest);

  const std::string script = testing::test_source_dir() + "/train/python/reference_step.py";
  const auto python =
      testing::run_process(testing::python_path() + " " + script + " " + dir.path() + " " + model_name);
  ASSERT_EQ(python.exit_code, 0) << "the PyTorch reference failed (is python3-torch installed?):\n"
                                 << python.err;
}

void expect_after_two_steps(const testing::TempDir& dir, models::Classifier& model) {
  for (const auto& item : parameters_and_buffers(model)) {
    expect_close(item.value(),
                 read_tensor(dir.file("out.after." + item.key() + ".bin"), item.value().sizes()),
                 "after two steps: " + item.key());
  }
}

void check_parity(const std::string& model_name) {
  testing::TempDir dir;
  torch::manual_seed(3);
  auto model = models::create_model(model_name, {1, 28, 28}, 10);
  model->train();
  const torch::Tensor x = torch::randn({8, 1, 28, 28});  // [B, 1, 28, 28]
  const torch::Tensor labels = torch::tensor(std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7});
  write_reference(dir, model_name, *model, x, labels);

  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  optimizer.zero_grad();
  const torch::Tensor logits = model->forward(x);
  const torch::Tensor loss = torch::nn::functional::cross_entropy(logits, labels);
  loss.backward();
  expect_close(logits, read_tensor(dir.file("out.logits.bin"), logits.sizes()), "logits");
  EXPECT_NEAR(loss.item<double>(), read_json_file(dir.file("out.loss.json"))["loss"].get<double>(), 1e-5);
  for (const auto& parameter : model->named_parameters()) {
    expect_close(parameter.value().grad(),
                 read_tensor(dir.file("out.grad." + parameter.key() + ".bin"), parameter.value().sizes()),
                 "grad " + parameter.key());
  }
  optimizer.step();
  optimizer.zero_grad();
  torch::nn::functional::cross_entropy(model->forward(x), labels).backward();
  optimizer.step();
  expect_after_two_steps(dir, *model);
}

}  // namespace

TEST(PythonParity, MlpForwardBackwardAndSgdMatchPyTorch) {
  check_parity("mlp");
}
TEST(PythonParity, CnnWithBatchNormMatchesPyTorch) {
  check_parity("cnn");
}

// The linear-chain step (ipj's fp32 mlp training step since it exists) against the same PyTorch golden
// values: its first step's logits and loss, and the weights after two steps.
TEST(PythonParity, MlpLinearChainStepMatchesPyTorch) {
  testing::TempDir dir;
  torch::manual_seed(3);
  auto model = models::create_model("mlp", {1, 28, 28}, 10);
  const torch::Tensor x = torch::randn({8, 1, 28, 28});  // [B, 1, 28, 28]
  const torch::Tensor labels = torch::tensor(std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7});
  write_reference(dir, "mlp", *model, x, labels);

  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  CapturableSgd sgd(optimizer);
  auto layers = linear_chain_layers("mlp", *model);
  ASSERT_TRUE(layers.has_value());
  const auto step = make_linear_chain_step(std::move(*layers), sgd, ChainPrecision::fp32);
  data::Batch batch;
  batch.images = x;
  batch.labels = labels;
  StepContext context;
  context.learning_rate = 0.1;
  const StepLoss first = step->run(batch, context);
  expect_close(first.logits, read_tensor(dir.file("out.logits.bin"), first.logits.sizes()), "logits");
  EXPECT_NEAR(first.loss.item<double>(), read_json_file(dir.file("out.loss.json"))["loss"].get<double>(),
              1e-5);
  step->run(batch, context);
  expect_after_two_steps(dir, *model);
  EXPECT_STREQ(step->name(), "linear_chain");
}

}  // namespace ipj::train
