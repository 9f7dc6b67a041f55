// Test-set evaluation of a classifier: accuracy and mean cross-entropy, in eval mode without autograd.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "ipj/data/dataset.hpp"
#include "ipj/models/classifier.hpp"
#include "ipj/train/training_choices.hpp"

namespace ipj::train {

struct EvalResult {
  double accuracy = 0.0;  // 0..1
  double loss = 0.0;      // mean cross-entropy
  std::int64_t samples = 0;
  double wall_s = 0.0;
};

// Restores the module's train/eval mode afterwards.
// `precision` (resolved): the forward passes run in an AutocastRegion of that precision (fp32 = none).
EvalResult evaluate(models::Classifier& model, const data::ImageSet& images,
                    const data::Normalization& normalization, std::int64_t batch_size,
                    Precision precision = Precision::fp32, const DeviceSpec& device = {});

// Accuracy of any forward function that takes raw pixels: images [B, C, H, W] in [0, 1] -> logits [B,
// classes]. For inference models (int8, TorchScript, pruned) that carry their own preprocessing. `limit` > 0
// caps samples.
using PixelForward = std::function<torch::Tensor(const torch::Tensor&)>;
double pixel_accuracy(const PixelForward& forward, const data::ImageSet& images, std::int64_t batch_size,
                      std::int64_t limit = 0);

}  // namespace ipj::train
