// Private to the quant module: what QAT and pruning's fine-tuning share, i.e. SGD (momentum 0.9) on
// shuffled raw-pixel batches ([B, C, H, W] in [0, 1]) through the training loop of train/training_loop.hpp,
// and switching a program's weights to trainable.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ipj/data/batch_loader.hpp"
#include "ipj/quant/graph.hpp"
#include "ipj/quant/layer_program.hpp"
#include "ipj/train/training_loop.hpp"

namespace ipj::quant {

// The float forward pass of either model representation (quantize and prune evaluate both).
inline torch::Tensor float_forward(const LayerProgram& program, const torch::Tensor& x) {
  return run_float(program, x);
}
inline torch::Tensor float_forward(const Graph& graph, const torch::Tensor& x) {
  return run_graph(graph, x);
}

struct PixelTraining {
  int epochs = 1;
  double learning_rate = 0.01;
  std::int64_t batch_size = 128;
  std::uint64_t seed = 0;
  std::string label;  // progress: "<label> 1/3"
  bool show_progress = true;
};

// Trains `parameters` with SGD (momentum 0.9) on `images` as raw pixels: `loss` is the loss hook (the
// program's forward pass), `after_step` runs after each update (e.g. re-applying pruning masks).
void train_on_pixels(const data::ImageSet& images, const PixelTraining& settings,
                     const std::vector<torch::Tensor>& parameters, const train::LossHook& loss,
                     const std::function<void()>& after_step = nullptr);

// Weights and biases of the weighted layers become fresh leaf tensors that require grad; returned for an
// optimizer.
std::vector<torch::Tensor> make_trainable(LayerProgram& program);
// Detaches them again (no autograd history kept in the program).
void freeze(LayerProgram& program);
// The same for the conv2d and linear nodes of a graph.
std::vector<torch::Tensor> make_trainable(Graph& graph);
void freeze(Graph& graph);

}  // namespace ipj::quant
