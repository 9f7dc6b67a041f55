// Training users' TorchScript models (made at test time by Debian's python3-torch and torchvision): every
// architecture, scripted and traced, trains and its OUT/model.pt gives in Python the outputs ipj gives; two
// SGD steps equal PyTorch's own training of the same file (plain MLPs on the linear-chain step); --resume is
// bit-for-bit (BatchNorm + dropout).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "ipj/core/atomic_file.hpp"
#include "ipj/core/error.hpp"
#include "ipj/core/json_io.hpp"
#include "ipj/data/batch_loader.hpp"
#include "ipj/models/script_classifier.hpp"
#include "ipj/train/checkpoint.hpp"
#include "ipj/train/linear_chain_step.hpp"
#include "ipj/train/model_setup.hpp"
#include "ipj/train/trainer.hpp"
#include "support/test_support.hpp"
#include "support/user_models.hpp"

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

data::Dataset synthetic_data(const std::string& directory, std::int64_t train, std::int64_t test) {
  testing::write_synthetic_idx_dataset(directory, train, test, /*gzip=*/false);
  return data::load_dataset(directory);
}

TrainConfig user_config(const std::string& file, std::vector<std::int64_t> input_shape = {}) {
  TrainConfig config;
  config.model = models::ModelSource::torchscript(file, std::move(input_shape));
  config.epochs = 1;
  config.batch_size = 16;
  config.seed = 7;
  config.measure_energy = false;
  return config;
}

TrainHooks quiet() {
  TrainHooks hooks;
  hooks.show_progress = false;
  return hooks;
}

bool is_flat(const std::string& name) {
  return name.rfind("flat_", 0) == 0;
}

}  // namespace

TEST(UserModels, EveryArchitectureScriptedAndTracedTrainsAndItsTorchScriptGivesIpjsOutputsInPython) {
  testing::TempDir dir;
  std::vector<std::string> names;
  for (const char* architecture : {"mlp", "flat_mlp", "cnn_bn", "residual", "resnet18", "mobilenet_v2"})
    for (const char* kind : {"_scripted", "_traced"})
      names.push_back(std::string(architecture) + kind);
  const auto made = testing::make_user_models(dir.path(), names);
  ASSERT_EQ(made.exit_code, 0) << "python3-torch/torchvision could not make the models:\n" << made.err;
  const data::Dataset dataset = synthetic_data(dir.file("data"), 64, 32);
  torch::manual_seed(1);
  const torch::Tensor input = torch::randn({3, 1, 28, 28});  // normalised images
  write_tensor(dir.file("input.bin"), input);
  Json manifest = Json::array();
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    TrainConfig config = user_config(
        dir.file(name + ".pt"), is_flat(name) ? std::vector<std::int64_t>{784} : std::vector<std::int64_t>{});
    config.out_dir = dir.file("run-" + name);
    if (name.find("_traced") != std::string::npos) {  // the recipe's other features on the traced half
      // MobileNetV2's ReLU6 has no bf16 backward kernel in LibTorch 1.13 (checked below).
      config.precision = name == "mobilenet_v2_traced" ? Precision::fp32 : Precision::bf16;
      config.memory_format = MemoryFormat::channels_last;
      config.accum = 2;
    }
    const TrainResult result = run_training(config, dataset, quiet());
    ASSERT_EQ(result.epochs.size(), 1u);
    EXPECT_TRUE(std::isfinite(result.epochs[0].loss));
    EXPECT_EQ(result.report["model"]["source"], "torchscript");
    EXPECT_GT(result.report["model"]["parameters"].get<std::int64_t>(), 0);
    ASSERT_TRUE(std::filesystem::exists(config.out_dir + "/model.pt"));
    // The outputs ipj gives: the run folder's checkpoint loaded back as an inference model would.
    const TrainedModel trained = load_trained_model(config.out_dir);
    torch::NoGradGuard no_grad;
    write_tensor(dir.file(name + ".expected.bin"), trained.model->forward(input));
    manifest.push_back({{"name", name},
                        {"model", config.out_dir + "/model.pt"},
                        {"original", dir.file(name + ".pt")},
                        {"input", dir.file("input.bin")},
                        {"shape", is_flat(name) ? std::vector<std::int64_t>{3, 784} : input.sizes().vec()},
                        {"expected", dir.file(name + ".expected.bin")}});
  }
  // A user model reaching an operator without a bf16 kernel (MobileNetV2's ReLU6: no bf16 hardtanh_backward
  // in LibTorch 1.13): found by the probe step before training and trained in fp32, with the reason recorded.
  TrainConfig bf16 = user_config(dir.file("mobilenet_v2_scripted.pt"));
  bf16.precision = Precision::bf16;
  const TrainResult fell_back = run_training(bf16, dataset, quiet());
  EXPECT_EQ(fell_back.report["precision"]["requested"], "bf16");
  EXPECT_EQ(fell_back.report["precision"]["used"], "fp32")
      << "bf16 MobileNetV2 trained in bf16: LibTorch now has a bf16 hardtanh_backward, update this test";
  const std::string reason = fell_back.report["precision"]["reason"].get<std::string>();
  EXPECT_NE(reason.find("bf16 failed on this model"), std::string::npos) << reason;
  EXPECT_NE(reason.find("fell back to fp32"), std::string::npos) << reason;
  EXPECT_EQ(fell_back.epochs.size(), 1u);
  write_json_file(dir.file("check.json"), manifest);
  const auto checked = testing::run_user_models_script("check", dir.file("check.json"));
  ASSERT_EQ(checked.exit_code, 0) << checked.err;
  const Json answers = Json::parse(checked.out);
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(answers.contains(name));
    const Json& answer = answers[name];
    EXPECT_LT(answer["max_abs_diff"].get<double>(), 1e-5 * std::max(1.0, answer["max_abs"].get<double>()));
    EXPECT_FALSE(answer["training"].get<bool>());  // saved in eval mode, ready for inference
    EXPECT_TRUE(answer["has_ipj_json"].get<bool>());
    EXPECT_GT(answer["changed_from_original"].get<double>(), 0.0);  // the file's own weights were trained
  }
}

TEST(UserModels, TwoSgdStepsEqualPyTorchTrainingTheSameFile) {
  // ipj's trainer (fused SGD with momentum and weight decay, its loader's normalised and shuffled batches)
  // against torch.optim.SGD in Python on the same batches: parameters and BatchNorm statistics agree.
  testing::TempDir dir;
  // The mlps train on the linear-chain step, the residual net through autograd.
  const std::vector<std::string> names{"mlp_scripted", "seq_mlp_traced", "residual_scripted"};
  const auto made = testing::make_user_models(dir.path(), names);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const data::Dataset dataset = synthetic_data(dir.file("data"), 8, 8);
  Json manifest = Json::array();
  std::vector<TrainResult> results;
  for (const auto& name : names) {
    TrainConfig config = user_config(dir.file(name + ".pt"));
    config.batch_size = 4;  // 8 samples: two steps
    config.learning_rate = 0.1;
    config.weight_decay = 1e-3;
    results.push_back(run_training(config, dataset, quiet()));
    data::LoaderOptions options;
    options.batch_size = config.batch_size;
    options.seed = config.seed;
    options.epoch = 0;
    options.prefetch_batches = 0;
    data::BatchLoader loader(dataset.train, dataset.normalization, options);
    Json batches = Json::array();
    while (auto batch = loader.next()) {
      const std::string path = dir.file(name + ".batch" + std::to_string(batch->index) + ".bin");
      write_tensor(path, batch->images);
      const torch::Tensor labels = batch->labels.contiguous();
      batches.push_back(
          {{"input", path},
           {"shape", batch->images.sizes().vec()},
           {"labels", std::vector<std::int64_t>(labels.data_ptr<std::int64_t>(),
                                                labels.data_ptr<std::int64_t>() + labels.numel())}});
    }
    ASSERT_EQ(batches.size(), 2u);
    std::filesystem::create_directories(dir.file(name + ".after"));
    manifest.push_back({{"model", dir.file(name + ".pt")},
                        {"lr", config.learning_rate},
                        {"momentum", config.momentum},
                        {"weight_decay", config.weight_decay},
                        {"batches", batches},
                        {"out", dir.file(name + ".after")}});
  }
  write_json_file(dir.file("train.json"), manifest);
  const auto python = testing::run_user_models_script("train", dir.file("train.json"));
  ASSERT_EQ(python.exit_code, 0) << python.err;
  for (std::size_t index = 0; index < names.size(); ++index) {
    SCOPED_TRACE(names[index]);
    EXPECT_EQ(results[index].report["training_step"],
              names[index].find("mlp") != std::string::npos ? "linear_chain" : "fused_sgd");
    auto state = results[index].model->named_parameters();
    for (const auto& buffer : results[index].model->named_buffers())
      if (buffer.value().is_floating_point()) state.insert(buffer.key(), buffer.value());
    ASSERT_GT(state.size(), 3u);
    for (const auto& item : state) {
      const torch::Tensor expected =
          read_tensor(dir.file(names[index] + ".after/after." + item.key() + ".bin"), item.value().sizes());
      const double scale = std::max(1.0, expected.abs().max().item<double>());
      EXPECT_LT((item.value() - expected).abs().max().item<double>(), 1e-5 * scale) << item.key();
    }
  }
}

TEST(UserModels, ResumeIsBitExactWithBatchNormAndDropoutAndRefusesAnotherFile) {
  testing::TempDir dir;
  const auto made = testing::make_user_models(dir.path(), {"cnn_bn_scripted", "residual_scripted"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const data::Dataset dataset = synthetic_data(dir.file("data"), 48, 16);
  TrainConfig config = user_config(dir.file("cnn_bn_scripted.pt"));
  config.epochs = 2;
  config.out_dir = dir.file("straight");
  const TrainResult straight = run_training(config, dataset, quiet());

  // The same file under another name: the path may change, the content may not.
  std::filesystem::copy_file(dir.file("cnn_bn_scripted.pt"), dir.file("copy.pt"));
  config.out_dir = dir.file("resumed");
  config.epochs = 1;
  run_training(config, dataset, quiet());
  config.model.file = dir.file("copy.pt");
  config.epochs = 2;
  config.resume = true;
  const TrainResult resumed = run_training(config, dataset, quiet());
  EXPECT_EQ(resumed.resumed_from_epoch, 1);
  const auto expected = straight.model->named_parameters();
  for (const auto& item : resumed.model->named_parameters())
    EXPECT_TRUE(torch::equal(item.value(), expected[item.key()])) << item.key();
  const auto expected_buffers = straight.model->named_buffers();
  for (const auto& item : resumed.model->named_buffers())
    EXPECT_TRUE(torch::equal(item.value(), expected_buffers[item.key()])) << item.key();
  EXPECT_EQ(resumed.epochs[1].loss, straight.epochs[1].loss);

  // Another file at the original path: refused before any weight is loaded, naming the file.
  std::filesystem::copy_file(dir.file("residual_scripted.pt"), dir.file("copy.pt"),
                             std::filesystem::copy_options::overwrite_existing);
  config.epochs = 3;
  try {
    run_training(config, dataset, quiet());
    FAIL() << "a different model file was accepted by --resume";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::usage);
    EXPECT_NE(std::string(error.what()).find("copy.pt"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("is not the file"), std::string::npos) << error.what();
  }
}

TEST(UserModels, PlainLinearChainsTrainOnTheLinearChainStepAndEverythingElseThroughAutograd) {
  // name -> Linear layers the linear-chain step takes (0: the model stays on autograd).
  const std::vector<std::pair<std::string, std::size_t>> expected = {
      {"mlp_scripted", 2},
      {"mlp_traced", 2},
      {"flat_mlp_scripted", 2},
      {"view_mlp_scripted", 2},
      {"view_mlp_traced", 2},
      {"seq_mlp_scripted", 3},
      {"seq_mlp_traced", 3},
      {"dropout_mlp_traced", 2},  // traced in eval mode: dropout passes through
      {"dropout_mlp_scripted", 0},
      {"tied_mlp_scripted", 0},
      {"no_bias_mlp_scripted", 0},
      {"partly_frozen_mlp_traced", 0},
      {"relu_logits_mlp_scripted", 0},
      {"cnn_bn_scripted", 0},
      {"tied_residual_traced", 0}};
  std::vector<std::string> names;
  for (const auto& item : expected)
    names.push_back(item.first);
  testing::TempDir dir;
  const auto made = testing::make_user_models(dir.path(), names);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  for (const auto& [name, layer_count] : expected) {
    SCOPED_TRACE(name);
    const auto classifier = models::create_script_classifier(
        models::ModelSource::torchscript(dir.file(name + ".pt"), is_flat(name)
                                                                     ? std::vector<std::int64_t>{784}
                                                                     : std::vector<std::int64_t>{}),
        {1, 28, 28}, 10);
    const auto layers = script_linear_chain_layers(*classifier);
    ASSERT_EQ(layers.has_value(), layer_count > 0);
    if (!layers) continue;
    ASSERT_EQ(layers->size(), layer_count);
    for (std::size_t l = 0; l < layer_count; ++l)
      EXPECT_EQ((*layers)[l].relu, l + 1 < layer_count) << "layer " << l;
    // The module's own tensors, updated in place by the step.
    const auto parameters = classifier->named_parameters();
    const std::string first = name.rfind("seq_", 0) == 0 ? "1" : "fc1";
    EXPECT_TRUE((*layers)[0].weight.is_same(parameters[first + ".weight"]));
    EXPECT_TRUE((*layers)[0].bias.is_same(parameters[first + ".bias"]));
  }
  // Through the trainer: the step each run used is in its results.
  const data::Dataset dataset = synthetic_data(dir.file("data"), 64, 16);
  for (const auto& [name, step] : std::vector<std::pair<std::string, std::string>>{
           {"seq_mlp_traced", "linear_chain"}, {"dropout_mlp_scripted", "fused_sgd"}}) {
    TrainConfig config = user_config(dir.file(name + ".pt"));
    config.precision = Precision::bf16;
    const TrainResult result = run_training(config, dataset, quiet());
    EXPECT_EQ(result.report["training_step"], step) << name;
    EXPECT_TRUE(std::isfinite(result.epochs[0].loss)) << name;
  }
}

TEST(UserModels, ParametersAreTheScriptedModulesOwnTensorsWithPythonNames) {
  testing::TempDir dir;
  const auto made = testing::make_user_models(dir.path(), {"residual_scripted"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const auto classifier = models::create_script_classifier(
      models::ModelSource::torchscript(dir.file("residual_scripted.pt")), {1, 28, 28}, 10);
  const auto parameters = classifier->named_parameters();
  ASSERT_TRUE(parameters.contains("blocks.1.conv2.weight"));
  ASSERT_TRUE(classifier->named_buffers().contains("blocks.0.bn1.running_mean"));
  // Changing the registered tensor in place changes what the scripted module computes.
  torch::NoGradGuard no_grad;
  classifier->eval();
  const torch::Tensor x = torch::randn({2, 1, 28, 28});
  const torch::Tensor before = classifier->forward(x);
  parameters["fc.bias"].add_(1.0);
  EXPECT_TRUE(torch::allclose(classifier->forward(x), before + 1.0, 1e-5, 1e-5));
  // train()/eval() reach the scripted module: BatchNorm uses batch statistics in train mode.
  classifier->train();
  EXPECT_FALSE(torch::allclose(classifier->forward(x), before + 1.0, 1e-3, 1e-3));
}

}  // namespace ipj::train
