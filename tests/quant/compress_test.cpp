// Pruning and distillation: structured pruning removes exactly the weakest units/channels (the pruned program
// computes what the original computes with those units silenced), magnitude pruning keeps its zeros through
// fine-tuning, program files round-trip, and distillation beats the same student trained on labels alone.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "inference_fixture.hpp"
#include "ipj/infer/inference_model.hpp"
#include "ipj/quant/program_file.hpp"
#include "ipj/quant/prune.hpp"
#include "ipj/train/distill.hpp"

namespace ipj::quant {
namespace {

// The original program with the units/channels structured pruning removed set to zero (weights and bias):
// after ReLU they contribute nothing, so it must compute exactly what the pruned program computes.
LayerProgram silence_removed(const LayerProgram& original, const LayerProgram& pruned) {
  LayerProgram silenced = original;
  std::vector<std::size_t> weighted;
  for (std::size_t index = 0; index < original.layers.size(); ++index)
    if (original.layers[index].weight.defined()) weighted.push_back(index);
  for (std::size_t position = 0; position + 1 < weighted.size(); ++position) {
    Layer& layer = silenced.layers[weighted[position]];
    const torch::Tensor kept = pruned.layers[weighted[position]].bias;  // [kept]
    const torch::Tensor keep_mask = torch::isin(layer.bias, kept);      // biases are distinct floats here
    layer.weight = layer.weight * keep_mask.view({-1, 1, 1, 1})
                                      .expand_as(layer.weight.view({layer.weight.size(0), -1, 1, 1}))
                                      .reshape(layer.weight.sizes());
    layer.bias = layer.bias * keep_mask;
  }
  return silenced;
}

class Structured : public ::testing::TestWithParam<std::string> {};

TEST_P(Structured, RemovesUnitsAndComputesTheSilencedOriginal) {
  const SourceProgram source = load_source_program(testing::trained_checkpoint(GetParam()));
  const LayerProgram pruned = prune_structured(source.program, 0.5);
  torch::manual_seed(4);
  const torch::Tensor pixels = torch::rand({8, 1, 28, 28});
  torch::NoGradGuard no_grad;
  const torch::Tensor expected = run_float(silence_removed(source.program, pruned), pixels);
  EXPECT_LT((run_float(pruned, pixels) - expected).abs().max().item<double>(), 1e-4);
  EXPECT_LT(multiply_accumulates(pruned) * 2, multiply_accumulates(source.program) * 1.05);
  // identity at fraction 0
  EXPECT_TRUE(torch::allclose(run_float(prune_structured(source.program, 0.0), pixels),
                              run_float(source.program, pixels)));
}

INSTANTIATE_TEST_SUITE_P(MlpAndCnn, Structured, ::testing::Values("mlp", "cnn"));

TEST(Prune, MlpCountsAreExact) {
  const SourceProgram source = load_source_program(testing::trained_checkpoint("mlp"));
  const LayerProgram pruned = prune_structured(source.program, 0.5);  // 784-512-512-10 -> 784-256-256-10
  EXPECT_EQ(multiply_accumulates(pruned), 784 * 256 + 256 * 256 + 256 * 10);
  EXPECT_EQ(float_parameter_bytes(pruned), (784 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10) * 4);
}

// Hand-made weights, so that which weights and units go is known exactly.
TEST(Prune, DirectlyOnKnownWeightsMagnitudeZeroesTheSmallestAndStructuredKeepsTheStrongestUnits) {
  LayerProgram program;
  program.model_name = "tiny";
  program.input_shape = {1, 1, 4};
  Layer hidden;
  hidden.weight = torch::tensor({0.1f, -4.0f, 0.2f, 3.0f, -0.3f, 2.0f, 1.0f, -0.05f}).view({4, 2});  // [4, 2]
  hidden.bias = torch::tensor({1.0f, 2.0f, 3.0f, 4.0f});
  hidden.relu = true;
  Layer output;
  output.weight = torch::arange(8, torch::kFloat).view({2, 4});  // [2, 4]
  output.bias = torch::zeros({2});
  program.layers = {hidden, output};

  LayerProgram magnitude = program;
  const auto masks = prune_magnitude(magnitude, 0.5);
  ASSERT_EQ(masks.size(), 2u);
  // The 4 smallest |w| of the hidden layer (0.1, 0.2, -0.3, -0.05) are zeroed, the others stay as they were.
  EXPECT_TRUE(torch::equal(magnitude.layers[0].weight,
                           torch::tensor({0.0f, -4.0f, 0.0f, 3.0f, 0.0f, 2.0f, 1.0f, 0.0f}).view({4, 2})));
  EXPECT_TRUE(torch::equal(masks[0], magnitude.layers[0].weight.ne(0).to(torch::kFloat)));
  EXPECT_TRUE(torch::equal(magnitude.layers[1].weight,
                           torch::tensor({0.0f, 0.0f, 0.0f, 0.0f, 4.0f, 5.0f, 6.0f, 7.0f}).view({2, 4})));
  EXPECT_DOUBLE_EQ(weight_sparsity(magnitude), 8.0 / 16.0);

  // Structured: hidden units by L1 norm are 4.1, 3.2, 2.3, 1.05: units 0 and 1 stay (in order), with their
  // biases and the next layer's matching input columns; the last layer keeps all its outputs.
  const LayerProgram structured = prune_structured(program, 0.5);
  EXPECT_TRUE(torch::equal(structured.layers[0].weight, program.layers[0].weight.slice(0, 0, 2)));
  EXPECT_TRUE(torch::equal(structured.layers[0].bias, torch::tensor({1.0f, 2.0f})));
  EXPECT_TRUE(
      torch::equal(structured.layers[1].weight, torch::tensor({0.0f, 1.0f, 4.0f, 5.0f}).view({2, 2})));
  EXPECT_EQ(structured.model_name, "tiny-pruned");
  EXPECT_THROW(prune_magnitude(magnitude, 1.0), Error);
  EXPECT_THROW(prune_structured(program, -0.1), Error);
}

TEST(Prune, MagnitudeZerosStayZeroThroughFineTuningAndFilesRoundTrip) {
  testing::TempDir dir;
  LayerProgram program = load_source_program(testing::trained_checkpoint("mlp")).program;
  const auto masks = prune_magnitude(program, 0.75);
  EXPECT_NEAR(weight_sparsity(program), 0.75, 1e-4);
  data::ImageSet subset = testing::fashion_subset().train;
  subset.truncate(512);
  fine_tune(program, subset, 1, 0.01, 64, 0, false, masks);
  EXPECT_NEAR(weight_sparsity(program), 0.75, 1e-4);
  save_program(dir.file("sparse.pt"), program, {{"data_dir", data::kDefaultDataDirectory}});
  const ProgramFile loaded = load_program(dir.file("sparse.pt"));
  const torch::Tensor pixels = torch::rand({4, 1, 28, 28});
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(run_float(loaded.program, pixels), run_float(program, pixels)));
  // a program file is a model for bench/serve: fp32 and int8 variants load and agree
  const auto fp32 = infer::load_inference_model(dir.file("sparse.pt"));
  EXPECT_EQ(fp32->format, infer::ModelFormat::ipj_program);
  EXPECT_LT((fp32->forward(pixels) - run_float(program, pixels)).abs().max().item<double>(), 1e-4);
}

TEST(Distill, TeacherSignalBeatsLabelsAloneOnASmallLabelBudget) {
  const auto teacher = infer::load_inference_model(testing::trained_checkpoint("cnn"));
  // 500 labeled images + 5500 the student only sees through the teacher (trained on all 6000 labels).
  const data::Dataset& small = testing::fashion_subset();
  train::DistillOptions options;
  options.student = "mlp";
  options.epochs = 2;
  options.labeled_limit = 500;
  options.seed = 3;
  options.show_progress = false;
  auto forward = [&](const torch::Tensor& pixels) { return teacher->forward(pixels); };
  options.alpha = 0.0;
  const Json plain = train::run_distillation(options, small, forward);
  options.alpha = 0.7;
  const Json distilled = train::run_distillation(options, small, forward);
  EXPECT_GT(distilled["student_acc"].get<double>(), plain["student_acc"].get<double>() + 0.005)
      << "plain " << plain["student_acc"] << " distilled " << distilled["student_acc"] << " teacher "
      << distilled["teacher_acc"];
}

}  // namespace
}  // namespace ipj::quant
