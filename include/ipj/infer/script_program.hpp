// Compiles a LayerProgram into a frozen, inference-optimised TorchScript module (torch::jit::freeze +
// optimize_for_inference: constant-folded weights, oneDNN layouts and fused ops where LibTorch has them).
#pragma once

#include <torch/script.h>

#include "ipj/quant/layer_program.hpp"

namespace ipj::infer {

// The generated module's forward takes raw pixels [B, C, H, W] in [0, 1], like run_float.
torch::jit::Module script_program(const quant::LayerProgram& program, bool optimize = true);
// Freezes (and optionally optimises) a loaded TorchScript module in place of a copy; the module must be
// scripted with a forward method. Throws ipj::Error(unsupported) when LibTorch cannot freeze it.
torch::jit::Module freeze_for_inference(const torch::jit::Module& module, bool optimize = true);

}  // namespace ipj::infer
