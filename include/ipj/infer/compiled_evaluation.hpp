// `--compile jit` for training runs: test-set evaluation through a frozen, inference-optimised TorchScript
// copy of the model (BatchNorm and normalisation folded). mlp and cnn only (straight-line models).
#pragma once

#include <cstdint>
#include <string>

#include "ipj/data/dataset.hpp"
#include "ipj/models/classifier.hpp"
#include "ipj/train/evaluate.hpp"

namespace ipj::infer {

// Throws ipj::Error(unsupported) up front for models --compile jit cannot compile.
void require_compilable(const std::string& model_name);

// Compiles the model as it is now (eval-mode BatchNorm statistics) and evaluates accuracy and mean
// cross-entropy.
train::EvalResult evaluate_compiled(models::Classifier& model, const std::string& model_name,
                                    const data::Dataset& dataset, std::int64_t batch_size);

}  // namespace ipj::infer
