// QAT's and fine-tuning's training on raw pixels through the training loop, and trainable-weight helpers.
#include "program_training.hpp"

#include <torch/torch.h>

namespace ipj::quant {

void train_on_pixels(const data::ImageSet& images, const PixelTraining& settings,
                     const std::vector<torch::Tensor>& parameters, const train::LossHook& loss,
                     const std::function<void()>& after_step) {
  torch::optim::SGD optimizer(parameters, torch::optim::SGDOptions(settings.learning_rate).momentum(0.9));
  const std::unique_ptr<train::TrainingStep> step = train::make_torch_optimizer_step(optimizer, loss);
  const data::Normalization identity = data::identity_normalization(images.channels);
  train::EpochLoopOptions loop;
  loop.images = &images;
  loop.normalization = &identity;
  loop.loader = [&](int epoch) {
    data::LoaderOptions options;
    options.batch_size = settings.batch_size;
    options.seed = settings.seed;
    options.epoch = static_cast<std::uint64_t>(epoch);
    return options;
  };
  loop.epochs = settings.epochs;
  loop.schedule.base_lr = settings.learning_rate;
  loop.label = settings.label;
  loop.show_progress = settings.show_progress;
  train::EpochHooks hooks;
  if (after_step) hooks.after_step = [&](const train::StepContext&, const train::StepLoss&) { after_step(); };
  train::run_epochs(*step, loop, hooks);
}

std::vector<torch::Tensor> make_trainable(LayerProgram& program) {
  std::vector<torch::Tensor> parameters;
  for (Layer& layer : program.layers) {
    if (!layer.weight.defined()) continue;
    layer.weight = layer.weight.detach().clone().set_requires_grad(true);
    layer.bias = layer.bias.detach().clone().set_requires_grad(true);
    parameters.push_back(layer.weight);
    parameters.push_back(layer.bias);
  }
  return parameters;
}

void freeze(LayerProgram& program) {
  for (Layer& layer : program.layers) {
    if (!layer.weight.defined()) continue;
    layer.weight = layer.weight.detach();
    layer.bias = layer.bias.detach();
  }
}

std::vector<torch::Tensor> make_trainable(Graph& graph) {
  std::vector<torch::Tensor> parameters;
  for (GraphNode& node : graph.nodes) {
    if (!has_weights(node)) continue;
    node.weight = node.weight.detach().clone().set_requires_grad(true);
    node.bias = node.bias.detach().clone().set_requires_grad(true);
    parameters.push_back(node.weight);
    parameters.push_back(node.bias);
  }
  return parameters;
}

void freeze(Graph& graph) {
  for (GraphNode& node : graph.nodes) {
    if (!has_weights(node)) continue;
    node.weight = node.weight.detach();
    node.bias = node.bias.detach();
  }
}

}  // namespace ipj::quant
