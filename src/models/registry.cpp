// Model registry: names -> constructors (the catalog of names and capabilities is catalog.cpp).
#include "ipj/models/registry.hpp"

#include <torch/torch.h>

#include "ipj/core/error.hpp"
#include "ipj/models/flop_counter.hpp"
#include "ipj/models/resnet.hpp"
#include "ipj/models/script_classifier.hpp"
#include "ipj/models/simple_models.hpp"

namespace ipj::models {

ClassifierPtr create_model(const std::string& name, InputShape input, int num_classes) {
  if (num_classes < 2) fail(ErrorCategory::usage, "a classifier needs at least 2 classes");
  if (name == "mlp") return std::make_shared<Mlp>(input, num_classes);
  if (name == "cnn") return std::make_shared<SmallCnn>(input, num_classes);
  if (name == "resnet18") return make_resnet18(input, num_classes);
  if (name == "resnet50") return make_resnet50(input, num_classes);
  require_known_model(name);
  fail(ErrorCategory::internal, "model '" + name + "' is in the catalog but has no constructor");
}

ClassifierPtr build_classifier(const ModelSource& source, InputShape input, int num_classes) {
  if (num_classes < 2) fail(ErrorCategory::usage, "a classifier needs at least 2 classes");
  if (source.is_file()) return create_script_classifier(source, input, num_classes);
  return create_model(source.zoo_name, input, num_classes);
}

std::int64_t count_parameters(const torch::nn::Module& model) {
  std::int64_t total = 0;
  for (const auto& parameter : model.parameters())
    total += parameter.numel();
  return total;
}

ModelCounts count_model(Classifier& model, InputShape input, const torch::Device& device) {
  torch::NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  ModelCounts counts;
  counts.forward_flops_per_sample = count_flops([&] {
    model.forward(torch::zeros({1, input.channels, input.height, input.width}, torch::TensorOptions(device)));
  });
  if (was_training) model.train();
  counts.parameters = count_parameters(model);
  return counts;
}

}  // namespace ipj::models
