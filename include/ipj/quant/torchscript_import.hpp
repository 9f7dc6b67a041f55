// Imports a TorchScript module (scripted or traced) into ipj's graph IR: the module is frozen and inlined,
// shape guards (`if x.dim() != 4: raise`) are dropped, BatchNorm is folded into the conv/linear before it
// (or becomes a depthwise 1x1 conv), dropout and contiguous are identities. An operator outside the IR is
// refused with ipj::Error(unsupported) naming it and the module path where it sits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ipj/quant/graph.hpp"

namespace torch::jit {
struct Module;
}

namespace ipj::quant {

struct ImportOptions {
  std::vector<std::int64_t> input_shape;  // per sample, required: [C, H, W] or [features]
  std::vector<float> mean;                // the preprocessing the module expects: (pixels - mean) / std
  std::vector<float> std;
  int num_classes = 0;  // 0: taken from the output of a trial run
};

// The graph computes module((pixels - mean) / std) from pixels, with the normalisation folded into the first
// layer where it can be. `where` names the source in messages (the file path).
Graph import_torchscript(const torch::jit::Module& module, const std::string& where,
                         const ImportOptions& options);
// Loads `path` (ipj::Error(invalid_input) when it is not TorchScript) and imports it.
Graph import_torchscript_file(const std::string& path, const ImportOptions& options);

// The largest |graph(pixels) - module((pixels - mean) / std)| relative to the largest |module output|: the
// importer's self-check on real inputs (expected ~1e-6; BatchNorm folding changes float rounding only).
// pixels: [B, ...] float in [0, 1].
double import_difference(const torch::jit::Module& module, const Graph& graph, const ImportOptions& options,
                         const torch::Tensor& pixels);

}  // namespace ipj::quant
