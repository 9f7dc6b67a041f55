// The model catalog's capabilities against the code that serves them: every zoo model that claims a layer
// program, a graph builder, --compile jit or the Python seed loop gets one that computes what the model
// computes, and the others are refused. Untrained models on random pixels (no data set needed).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <sstream>

#include "ipj/core/error.hpp"
#include "ipj/infer/compiled_evaluation.hpp"
#include "ipj/models/catalog.hpp"
#include "ipj/models/registry.hpp"
#include "ipj/quant/graph_builders.hpp"
#include "ipj/quant/layer_program.hpp"
#include "test_support.hpp"

namespace ipj::quant {
namespace {

constexpr float kCatalogMean = 0.3f;
constexpr float kCatalogStd = 0.25f;

Json catalog_model_info(const std::string& name) {
  return {{"name", name},
          {"input_shape", {1, 28, 28}},
          {"num_classes", 10},
          {"mean", {kCatalogMean}},
          {"std", {kCatalogStd}}};
}

// An untrained zoo model in eval mode with BatchNorm statistics of its inputs (so folding is exercised).
models::ClassifierPtr catalog_model(const std::string& name, const torch::Tensor& normalized) {
  torch::manual_seed(5);
  auto model = models::create_model(name, models::InputShape{1, 28, 28}, 10);
  torch::NoGradGuard no_grad;
  model->train();
  model->forward(normalized);
  model->eval();
  return model;
}

double catalog_relative_error(const torch::Tensor& actual, const torch::Tensor& expected) {
  return ((actual - expected).norm() / expected.norm()).item<double>();
}

ErrorCategory catalog_error_category(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& error) {
    return error.category();
  }
  return ErrorCategory::internal;  // "did not throw": no test expects internal
}

TEST(ModelCatalog, EveryClaimedLayerProgramAndGraphComputesTheModel) {
  const torch::Tensor pixels = torch::rand({4, 1, 28, 28});
  const torch::Tensor normalized = (pixels - kCatalogMean) / kCatalogStd;
  for (const models::ModelEntry& entry : models::model_catalog()) {
    SCOPED_TRACE(entry.name);
    const auto model = catalog_model(entry.name, normalized);
    const Json info = catalog_model_info(entry.name);
    torch::NoGradGuard no_grad;
    const torch::Tensor expected = model->forward(normalized);
    if (entry.has_layer_program()) {
      const LayerProgram program = extract_program(*model, info);
      EXPECT_EQ(program.layers.size(), entry.layer_program.size());
      EXPECT_LT(catalog_relative_error(run_float(program, pixels), expected), 1e-4);
      EXPECT_NO_THROW(infer::require_compilable(entry.name));
      EXPECT_EQ(entry.graph, models::GraphBuilder::from_layer_program);  // the program is its graph
    } else {
      EXPECT_EQ(catalog_error_category([&] { extract_program(*model, info); }), ErrorCategory::unsupported);
      EXPECT_EQ(catalog_error_category([&] { infer::require_compilable(entry.name); }),
                ErrorCategory::unsupported);
    }
    if (entry.has_graph()) {
      const Graph graph = extract_graph(*model, info);
      EXPECT_EQ(graph.model_name, entry.name);
      EXPECT_LT(catalog_relative_error(run_graph(graph, pixels), expected), 1e-4);
    } else {
      EXPECT_EQ(catalog_error_category([&] { extract_graph(*model, info); }), ErrorCategory::unsupported);
    }
  }
}

TEST(ModelCatalog, PythonSeedLoopModelsAreTheScriptsChoices) {
  std::ifstream file(testing::test_source_dir() + "/../bench/python/seed_train_loop.py");
  ASSERT_TRUE(file) << "bench/python/seed_train_loop.py not found";
  std::stringstream text;
  text << file.rdbuf();
  std::string choices;
  for (const models::ModelEntry& entry : models::model_catalog())
    if (entry.python_seed_loop) choices += (choices.empty() ? "" : ", ") + ("\"" + entry.name + "\"");
  EXPECT_NE(text.str().find("choices=[" + choices + "]"), std::string::npos)
      << "the script's --model choices differ from the catalog's python_seed_loop models: " << choices;
}

TEST(ModelCatalog, NamesAFileOrUnknownModelHasNoCapability) {
  EXPECT_FALSE(models::has_layer_program("runs/model.pt"));
  EXPECT_EQ(models::find_model_entry("vgg"), nullptr);
  EXPECT_EQ(catalog_error_category([] { infer::require_compilable("vgg"); }), ErrorCategory::unsupported);
  // The refusal names the models that do have a layer program, from the catalog.
  try {
    infer::require_compilable("resnet18");
    FAIL() << "resnet18 compiled";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("compiles mlp and cnn;"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace ipj::quant
