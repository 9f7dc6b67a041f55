// The names and descriptions of ipj's built-in models (LibTorch-free, for flag validation and listings).
#pragma once

#include <string>
#include <vector>

namespace ipj::models {

struct ModelEntry {
  std::string name;
  std::string description;
  bool convolutional = false;  // dominated by convolutions (oneDNN, OpenMP pool) rather than GEMMs (OpenBLAS)
};

// The catalog entry of `name`; throws like require_known_model for an unknown one.
const ModelEntry& model_entry(const std::string& name);

// All registered models, in a stable order: mlp, cnn, resnet18, resnet50.
const std::vector<ModelEntry>& model_catalog();

// Throws ipj::Error(usage) naming `flag` and listing the known models when `name` is not one of them.
void require_known_model(const std::string& name, const std::string& flag = "--model");

}  // namespace ipj::models
