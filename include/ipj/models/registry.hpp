// The model registry: every model ipj can build, by name, with its description, parameter and FLOP counts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ipj/models/catalog.hpp"
#include "ipj/models/classifier.hpp"
#include "ipj/models/model_source.hpp"

namespace ipj::models {

// Builds a freshly initialised model (LibTorch's default init, from the global torch seed).
// Throws ipj::Error(usage) for an unknown name, listing the known ones.
ClassifierPtr create_model(const std::string& name, InputShape input, int num_classes);

// A zoo model (create_model) or a user's TorchScript file (models/script_classifier.hpp: input shape and
// class count checked against the data) for images of `input` and `num_classes` classes.
ClassifierPtr build_classifier(const ModelSource& source, InputShape input, int num_classes);

std::int64_t count_parameters(const torch::nn::Module& model);

// What `ipj models` and training reports list of a model.
struct ModelCounts {
  std::int64_t parameters = 0;
  std::int64_t forward_flops_per_sample = 0;  // models/flop_counter.hpp: 2 per multiply-add
};
// Counts `model` for one image of `input` on `device`: one forward in eval mode without gradients (the
// training mode is restored).
ModelCounts count_model(Classifier& model, InputShape input, const torch::Device& device = torch::kCPU);

}  // namespace ipj::models
