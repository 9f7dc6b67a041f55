// The names and descriptions of ipj's built-in models (LibTorch-free, for flag validation and listings).
#pragma once

#include <string>
#include <vector>

namespace ipj::models {

struct ModelEntry {
  std::string name;
  std::string description;
};

// All registered models, in a stable order: mlp, cnn, resnet18, resnet50.
const std::vector<ModelEntry>& model_catalog();

// Throws ipj::Error(usage) naming `flag` and listing the known models when `name` is not one of them.
void require_known_model(const std::string& name, const std::string& flag = "--model");

}  // namespace ipj::models
