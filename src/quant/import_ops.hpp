// Private to the quant module: the TorchScript node walker behind import_torchscript (one handler per
// operator) and the module path of a node (from its inlined call stack).
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ipj/quant/graph.hpp"

namespace ipj::quant {

struct ModulePlace {
  std::string path;        // "layer1.0.conv1"; empty for the top-level module
  std::string class_name;  // of the innermost module, e.g. "torch.nn.modules.conv.Conv2d"
};
ModulePlace module_place(const torch::jit::Node* node);

// The frozen, inlined graph's nodes as graph IR nodes (no normalisation, no fusion yet; dead nodes dropped).
// input_shape is per sample. Throws ipj::Error(unsupported) naming the operator and its module path.
Graph walk_torchscript_graph(const torch::jit::Graph& graph, const std::string& where,
                             const std::vector<std::int64_t>& input_shape);

}  // namespace ipj::quant
