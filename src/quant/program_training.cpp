// The epoch loop and trainable-weight helpers shared by QAT and fine-tuning.
#include "program_training.hpp"

#include "ipj/core/progress.hpp"

namespace ipj::quant {

void for_each_pixel_batch(const data::ImageSet& images, int epochs, std::int64_t batch_size,
                          std::uint64_t seed, const std::string& label, bool show_progress,
                          const std::function<void(const data::Batch&)>& step) {
  const data::Normalization identity = data::identity_normalization(images.channels);
  for (int epoch = 0; epoch < epochs; ++epoch) {
    data::LoaderOptions options;
    options.batch_size = batch_size;
    options.seed = seed;
    options.epoch = static_cast<std::uint64_t>(epoch);
    data::BatchLoader loader(images, identity, options);
    ProgressBar progress(label + " " + std::to_string(epoch + 1) + "/" + std::to_string(epochs),
                         loader.batch_count(), show_progress);
    std::int64_t done = 0;
    while (auto batch = loader.next()) {
      step(*batch);
      progress.update(++done);
    }
    progress.finish();
  }
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
