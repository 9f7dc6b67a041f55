// The names, descriptions and capabilities of ipj's built-in models (LibTorch-free, for flag validation,
// listings and every "what does this model support" question). Adding a zoo model means one catalog row
// (src/models/catalog.cpp) plus its constructor in registry.cpp; nothing else compares model names.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ipj::models {

// One step of a model's straight line of layers, naming the module(s) quant::extract_program reads.
struct ProgramStep {
  enum class Kind { flatten, max_pool2d, linear, conv_bn };
  Kind kind = Kind::flatten;
  std::string module;        // linear / conv_bn: the Linear or Conv2d module ("fc1", "conv1")
  std::string norm;          // conv_bn: the BatchNorm2d module folded into the convolution ("bn1")
  bool relu = false;         // linear: followed by ReLU (conv_bn always is)
  std::int64_t padding = 0;  // conv_bn
};

// How quant::extract_graph builds a trained model's graph IR (ONNX export, int8 graphs, the graph runtime).
enum class GraphBuilder {
  none,                // no graph: the model stays eager / TorchScript
  from_layer_program,  // the layer program as a graph (needs layer_program)
  resnet,              // quant::resnet_graph reads the ResNet's modules
};

// `ipj compare`'s recipe values for a model (the seed recipe's epoch cap, the optimized recipe's schedule).
struct CompareDefaults {
  double target_acc = 0.90;
  int baseline_max_epochs = 15;
  int optimized_epochs = 10;
  std::int64_t optimized_batch = 256;
  double optimized_lr = 0.05;
};

// `ipj tune`'s default search values for a model; empty: the general defaults (search_space.cpp).
struct TuneDefaults {
  std::vector<std::int64_t> batches;
  std::vector<std::int64_t> epochs;
};

struct ModelEntry {
  std::string name;
  std::string description;
  bool convolutional = false;  // dominated by convolutions (oneDNN, OpenMP pool) rather than GEMMs (OpenBLAS)
  // A straight line of layers (empty: not one): int8 layer programs, pruning, distillation, --compile jit.
  std::vector<ProgramStep> layer_program;
  GraphBuilder graph = GraphBuilder::none;
  bool python_seed_loop = false;  // bench/python/seed_train_loop.py has it (ipj compare --python-baseline)
  // A user's TorchScript file borrows the recipe defaults of the template entry whose `convolutional`
  // matches.
  bool file_template = false;
  CompareDefaults compare;
  TuneDefaults tune;

  bool has_layer_program() const { return !layer_program.empty(); }
  bool has_graph() const { return graph != GraphBuilder::none; }
};

// The catalog entry of `name`; throws like require_known_model for an unknown one.
const ModelEntry& model_entry(const std::string& name);

// The catalog entry of `name`, or nullptr for a name that is not a zoo model (e.g. a TorchScript file).
const ModelEntry* find_model_entry(const std::string& name);

// Whether `name` is a zoo model with a layer program (false for other names, e.g. a TorchScript file's).
bool has_layer_program(const std::string& name);

// The entry whose recipe defaults a user's TorchScript model borrows: the file template with the same
// `convolutional` (cnn's for a model with 4-D weights, mlp's otherwise).
const ModelEntry& file_template_entry(bool convolutional);

// All registered models, in a stable order: mlp, cnn, resnet18, resnet50.
const std::vector<ModelEntry>& model_catalog();

// The names of the models that satisfy `has`, for messages: "mlp and cnn", "a, b and c" ("none" if none).
template <typename Predicate>
std::string model_names_where(Predicate has) {
  std::vector<std::string> names;
  for (const ModelEntry& entry : model_catalog())
    if (has(entry)) names.push_back(entry.name);
  if (names.empty()) return "none";
  std::string text = names.front();
  for (std::size_t index = 1; index < names.size(); ++index)
    text += (index + 1 == names.size() ? " and " : ", ") + names[index];
  return text;
}

// Throws ipj::Error(usage) naming `flag` and listing the known models when `name` is not one of them.
void require_known_model(const std::string& name, const std::string& flag = "--model");

}  // namespace ipj::models
