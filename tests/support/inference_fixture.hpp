// Trained models shared by the quantization, inference and serving tests: trained once per test process on a
// Fashion-MNIST subset (seconds), kept in a temporary folder until the process exits.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>

#include "ipj/data/dataset.hpp"
#include "support/test_support.hpp"

namespace ipj::testing {

// The first 6000 training and 2000 test images of the real Fashion-MNIST.
const data::Dataset& fashion_subset();
// The first `count` test images of fashion_subset() as raw pixels [count, 1, 28, 28] in [0, 1].
torch::Tensor test_pixels(std::int64_t count);
// Path of checkpoint.pt of an "mlp" (2 epochs) or "cnn" (1 epoch) trained on fashion_subset().
std::string trained_checkpoint(const std::string& model);

}  // namespace ipj::testing
