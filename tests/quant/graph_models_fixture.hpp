// The TorchScript models of make_graph_models.py (python3-torch/torchvision, made once per test process) and
// PyTorch's own outputs for them, shared by the graph importer, int8 and workflow tests.
#pragma once

#include <torch/script.h>

#include <string>

#include "ipj/quant/torchscript_import.hpp"
#include "support/test_support.hpp"

namespace ipj::testing {

inline constexpr float kGraphModelMean = 0.2860f, kGraphModelStd = 0.3530f;  // what the Python models expect

struct GraphModels {
  TempDir dir;
  torch::jit::Module golden;  // buffers: input [64, 1, 28, 28] raw test pixels, <model> outputs, accuracies
  GraphModels();
  torch::Tensor tensor(const std::string& name) const;
  std::string file(const std::string& name) const { return dir.file(name); }
};

const GraphModels& graph_models();

// --input-shape 1,28,28 and, for the models that expect normalised input (all but cnn_bn), --mean/--std.
quant::ImportOptions graph_model_import_options(const std::string& model);

}  // namespace ipj::testing
