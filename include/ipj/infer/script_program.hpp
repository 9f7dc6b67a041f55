// Compiles a LayerProgram into a frozen TorchScript module, and freezes user modules: torch::jit::freeze
// (constant weights), optionally optimize_for_inference (BN folded, oneDNN layouts and fused ops where
// LibTorch has them) and ipj's batch-1 linear, or XNNPACK's prepacked operators (in memory only, never
// saved).
#pragma once

#include <torch/script.h>

#include "ipj/quant/layer_program.hpp"

namespace ipj::infer {

enum class Freezing {
  frozen,            // what files get: 1.13's optimize_for_inference graphs do not load back after save
  optimized,         // + optimize_for_inference
  optimized_batch1,  // + aten::linear -> ipj::linear first (the frozen fp32 engine and the jit variant)
  xnnpack,  // optimizeForMobile: BN folded, convolutions and linear layers as XNNPACK operators with their
            // ReLU/clamp fused (the fp32 engine's batch-1 candidate; throws where LibTorch has no XNNPACK)
};

// The generated module's forward takes raw pixels [B, C, H, W] in [0, 1], like run_float.
torch::jit::Module script_program(const quant::LayerProgram& program,
                                  Freezing freezing = Freezing::optimized);
// Freezes a copy of a loaded TorchScript module (scripted, with a forward method). Throws
// ipj::Error(unsupported) when LibTorch cannot freeze or optimise it.
torch::jit::Module freeze_for_inference(const torch::jit::Module& module,
                                        Freezing freezing = Freezing::optimized);

}  // namespace ipj::infer
