// The model catalog: one row per zoo model with what it supports (catalog.hpp). LibTorch-free; the
// constructors are in registry.cpp, and tests/models/catalog_test.cpp checks every capability a row claims.
#include "ipj/models/catalog.hpp"

#include "ipj/core/error.hpp"

namespace ipj::models {
namespace {

using Kind = ProgramStep::Kind;

ProgramStep linear_step(const char* module, bool relu) {
  return {Kind::linear, module, "", relu, 0};
}

ProgramStep conv_bn_step(const char* conv, const char* norm, std::int64_t padding) {
  return {Kind::conv_bn, conv, norm, true, padding};
}

ModelEntry named(const char* name, const char* description, bool convolutional) {
  ModelEntry entry;
  entry.name = name;
  entry.description = description;
  entry.convolutional = convolutional;
  return entry;
}

std::vector<ModelEntry> build_catalog() {
  const ProgramStep flatten{Kind::flatten, "", "", false, 0};
  const ProgramStep pool{Kind::max_pool2d, "", "", false, 0};
  ModelEntry mlp = named("mlp", "784-512-512-10 multilayer perceptron (seed 000)", false);
  mlp.layer_program = {flatten, linear_step("fc1", true), linear_step("fc2", true),
                       linear_step("fc3", false)};
  mlp.graph = GraphBuilder::from_layer_program;
  mlp.python_seed_loop = true;
  mlp.file_template = true;
  // Tuned on this VM (docs/PERFORMANCE.md).
  mlp.compare.target_acc = 0.88;
  mlp.compare.baseline_max_epochs = 10;
  mlp.compare.optimized_epochs = 4;
  mlp.compare.optimized_batch = 256;
  mlp.compare.optimized_lr = 0.1;
  mlp.tune.batches = {128, 256, 512, 1024};
  mlp.tune.epochs = {2, 3, 4, 6};

  ModelEntry cnn =
      named("cnn", "2x(conv3x3 + BN + ReLU + maxpool) + FC128 + FC (Fashion-MNIST ~0.92-0.93 class)", true);
  cnn.layer_program = {conv_bn_step("conv1", "bn1", 1),
                       pool,
                       conv_bn_step("conv2", "bn2", 1),
                       pool,
                       flatten,
                       linear_step("fc1", true),
                       linear_step("fc2", false)};
  cnn.graph = GraphBuilder::from_layer_program;
  cnn.python_seed_loop = true;
  cnn.file_template = true;
  // The 2-epoch cosine at batch 128 reached 0.90 at its second epoch for seeds 0, 1, 2; batch 256 needed a
  // third epoch for seed 2 (docs/PERFORMANCE.md).
  cnn.compare.target_acc = 0.90;
  cnn.compare.baseline_max_epochs = 8;
  cnn.compare.optimized_epochs = 2;
  cnn.compare.optimized_batch = 128;
  cnn.compare.optimized_lr = 0.05;
  cnn.tune.epochs = {2, 3, 4};

  // The ResNets' compare recipes are untuned (CompareDefaults' values).
  ModelEntry resnet18 = named(
      "resnet18", "ResNet-18, small-image variant (3x3 stem, no max-pool), seed 004's case study", true);
  resnet18.graph = GraphBuilder::resnet;
  ModelEntry resnet50 = named("resnet50", "ResNet-50 (bottleneck), small-image variant", true);
  resnet50.graph = GraphBuilder::resnet;
  return {mlp, cnn, resnet18, resnet50};
}

}  // namespace

const std::vector<ModelEntry>& model_catalog() {
  static const std::vector<ModelEntry> catalog = build_catalog();
  return catalog;
}

const ModelEntry* find_model_entry(const std::string& name) {
  for (const auto& entry : model_catalog())
    if (entry.name == name) return &entry;
  return nullptr;
}

bool has_layer_program(const std::string& name) {
  const ModelEntry* entry = find_model_entry(name);
  return entry != nullptr && entry->has_layer_program();
}

const ModelEntry& model_entry(const std::string& name) {
  if (const ModelEntry* entry = find_model_entry(name)) return *entry;
  require_known_model(name);
  fail(ErrorCategory::internal, "model_entry: '" + name + "' not found");
}

const ModelEntry& file_template_entry(bool convolutional) {
  for (const auto& entry : model_catalog())
    if (entry.file_template && entry.convolutional == convolutional) return entry;
  fail(ErrorCategory::internal, std::string("the model catalog has no file template for ") +
                                    (convolutional ? "convolutional" : "non-convolutional") + " models");
}

void require_known_model(const std::string& name, const std::string& flag) {
  if (find_model_entry(name) != nullptr) return;
  std::string known;
  for (const auto& entry : model_catalog())
    known += (known.empty() ? "" : ", ") + entry.name;
  fail(ErrorCategory::usage, flag + ": unknown model '" + name + "' (known: " + known + ")");
}

}  // namespace ipj::models
