// Private to the quant module: what QAT and pruning's fine-tuning share, i.e. shuffled passes over raw-pixel
// batches ([B, C, H, W] in [0, 1]) with a progress bar per epoch, and switching a program's weights to
// trainable.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ipj/data/batch_loader.hpp"
#include "ipj/quant/graph.hpp"
#include "ipj/quant/layer_program.hpp"

namespace ipj::quant {

void for_each_pixel_batch(const data::ImageSet& images, int epochs, std::int64_t batch_size,
                          std::uint64_t seed, const std::string& label, bool show_progress,
                          const std::function<void(const data::Batch&)>& step);

// Weights and biases of the weighted layers become fresh leaf tensors that require grad; returned for an
// optimizer.
std::vector<torch::Tensor> make_trainable(LayerProgram& program);
// Detaches them again (no autograd history kept in the program).
void freeze(LayerProgram& program);
// The same for the conv2d and linear nodes of a graph.
std::vector<torch::Tensor> make_trainable(Graph& graph);
void freeze(Graph& graph);

}  // namespace ipj::quant
