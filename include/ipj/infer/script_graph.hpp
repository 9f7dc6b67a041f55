// Graph IR -> TorchScript (generated source, weights as parameters), frozen; optimised only in memory (the
// fp32 engine), since export saves it. Its forward takes raw pixels [B, ...input_shape] in [0, 1], as the
// graph.
#pragma once

#include <torch/script.h>

#include "ipj/infer/script_program.hpp"
#include "ipj/quant/graph.hpp"

namespace ipj::infer {

// Throws ipj::Error(unsupported) when LibTorch cannot compile or freeze the generated module.
torch::jit::Module script_graph(const quant::Graph& graph, Freezing freezing = Freezing::frozen);

// A user's module behind its preprocessing: forward(pixels) = model((pixels - mean) / std) (no wrapper when
// `mean` is empty), frozen (not optimised: the result is saved).
torch::jit::Module wrap_normalization(const torch::jit::Module& model, const std::vector<float>& mean,
                                      const std::vector<float>& std, std::size_t sample_rank);

}  // namespace ipj::infer
