// The model registry: every model ipj can build, by name, with its description, parameter and FLOP counts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ipj/models/classifier.hpp"

namespace ipj::models {

struct ModelEntry {
  std::string name;
  std::string description;
};

// All registered models, in a stable order: mlp, cnn, resnet18, resnet50.
const std::vector<ModelEntry>& model_catalog();

// Builds a freshly initialised model (LibTorch's default init, from the global torch seed).
// Throws ipj::Error(usage) for an unknown name, listing the known ones.
ClassifierPtr create_model(const std::string& name, InputShape input, int num_classes);

std::int64_t count_parameters(const torch::nn::Module& model);

}  // namespace ipj::models
