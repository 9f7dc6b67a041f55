// A hand-written training step for models that are a straight chain of Linear layers with ReLU between them
// (the mlp; any zoo model whose layer program is flatten + linear steps; a TorchScript MLP), trained on the
// CPU by SGD with momentum on cross-entropy, in fp32 or bf16: each GEMM writes into a buffer kept across
// steps, the elementwise work runs as fused passes (bias + ReLU, ReLU mask + bias gradient, SGD + bf16 weight
// copy), and there is no autograd graph and no autocast cast per step. The same maths as autograd +
// CapturableSgd up to rounding. Limits: CPU, fp32 or bf16, one micro-batch per update, no step hooks
// (training_setup.cpp, takes_linear_chain_step, checks them before choosing this step).
#pragma once

#include <torch/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ipj/models/classifier.hpp"
#include "ipj/train/training_loop.hpp"

namespace ipj::models {
class ScriptClassifier;
}  // namespace ipj::models

namespace ipj::train {

class CapturableSgd;

// One Linear layer of the chain: y = x W^T + b, then ReLU when `relu`.
struct ChainLayer {
  torch::Tensor weight;  // [out, in] fp32, the model's own parameter (updated in place)
  torch::Tensor bias;    // [out] fp32
  bool relu = false;
};

enum class ChainPrecision { fp32, bf16 };
// Where the GEMMs run: oneDNN's own primitives where built in and native here, else ATen (best), or ATen's
// at::mm always (aten: OpenBLAS for fp32; the path of builds without libdnnl-dev, for tests and comparisons).
enum class ChainGemms { best, aten };

// The layers of a zoo model whose layer program is flatten then Linear steps (the last without ReLU), or
// nullopt for any other model (TorchScript files: script_linear_chain_layers).
std::optional<std::vector<ChainLayer>> linear_chain_layers(const std::string& zoo_name,
                                                           models::Classifier& model);

// The layers of a user's TorchScript module whose forward, inlined, is flatten (or view(B, -1)) then
// linear (+ relu) steps on its own trainable parameters, the last without ReLU; nullopt for anything else
// (dropout, BatchNorm, other operators, tied or frozen weights, a Linear without bias). src:
// script_linear_chain.cpp.
std::optional<std::vector<ChainLayer>> script_linear_chain_layers(const models::ScriptClassifier& model);

// The step over `layers`, updating them with `sgd`'s settings and momentum buffers (so checkpoints and
// --resume see what it trained). Images [B, ...] flatten to [B, layers[0].in]; labels [B] int64.
std::unique_ptr<TrainingStep> make_linear_chain_step(std::vector<ChainLayer> layers, CapturableSgd& sgd,
                                                     ChainPrecision precision,
                                                     ChainGemms gemms = ChainGemms::best);

}  // namespace ipj::train
