// A small MobileNet-like TorchScript model for the fp32 engine tests (stem conv + BN + ReLU6, depthwise 3x3,
// pointwise 1x1, global average pool, linear) and how they load it. Input [B, 1, 12, 12] -> [B, 4].
#pragma once

#include <torch/script.h>

#include <cstdint>
#include <string>

#include "ipj/infer/fp32_engine.hpp"
#include "ipj/infer/inference_model.hpp"

namespace ipj::infer {

// The model; `first_line` (TorchScript) runs first on the input x (e.g. "x = torch.sqrt(x)").
torch::jit::Module depthwise_module(const std::string& first_line = "");

// How the tests load it: fp32, a 1x12x12 sample, `engine`, timed at `batch` besides 1.
LoadOptions depthwise_options(Fp32Engine engine, std::int64_t batch);

}  // namespace ipj::infer
