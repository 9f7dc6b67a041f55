// Private to the export module: graph IR -> TorchScript (generated source, weights as parameters), frozen and
// optimised for inference. The module's forward takes raw pixels [B, ...input_shape] in [0, 1], as the graph.
#pragma once

#include <torch/script.h>

#include "ipj/quant/graph.hpp"

namespace ipj::exporter {

// Throws ipj::Error(unsupported) when LibTorch cannot compile or freeze the generated module.
torch::jit::Module script_graph(const quant::Graph& graph);

// A user's module behind its preprocessing: forward(pixels) = model((pixels - mean) / std) (no wrapper when
// `mean` is empty), frozen and optimised.
torch::jit::Module wrap_normalization(const torch::jit::Module& model, const std::vector<float>& mean,
                                      const std::vector<float>& std, std::size_t sample_rank);

}  // namespace ipj::exporter
