// `ipj prune`: magnitude pruning (zeroes the smallest weights of each layer; same FLOPs on dense kernels, the
// sparsity is recorded) and structured pruning (removes whole hidden units / channels by L1 norm, so the
// model really gets smaller and cheaper), each followed by fine-tuning on the training set. LayerPrograms
// (mlp, cnn) and graphs (ResNets, TorchScript files) alike; graphs are written as graph files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ipj/core/json_io.hpp"
#include "ipj/data/dataset.hpp"
#include "ipj/quant/graph.hpp"
#include "ipj/quant/layer_program.hpp"
#include "ipj/quant/torchscript_import.hpp"

namespace ipj::quant {

// Removes `fraction` of the outputs of every weighted layer but the last (at least one kept), and the
// matching inputs of the next weighted layer (through pool/flatten). `tied` (optional) gets what kept
// channels: here the last layer, whose outputs are the classes.
LayerProgram prune_structured(const LayerProgram& program, double fraction, std::string* tied = nullptr);
// Zeroes the `sparsity` fraction of smallest-magnitude weights per layer; returns one 0/1 mask per layer
// index (undefined for layers without weights).
std::vector<torch::Tensor> prune_magnitude(LayerProgram& program, double sparsity);
// Fraction of zero weights over all weighted layers.
double weight_sparsity(const LayerProgram& program);

// SGD (momentum 0.9) fine-tuning of the program's weights with cross-entropy; masks (if any) stay applied.
void fine_tune(LayerProgram& program, const data::ImageSet& images, int epochs, double learning_rate,
               std::int64_t batch_size, std::uint64_t seed, bool show_progress,
               const std::vector<torch::Tensor>& masks = {});

// Graph versions. Structured: the conv/linear nodes whose channels reach only dense conv/linear readers
// (through activations, pools, flatten) lose channels; those feeding a residual add, a depthwise conv or the
// output keep them; `tied` (optional) gets which nodes kept their channels and why. Throws
// ipj::Error(unsupported) when no node can lose channels.
Graph prune_structured(const Graph& graph, double fraction, std::string* tied = nullptr);
std::vector<torch::Tensor> prune_magnitude(Graph& graph, double sparsity);
double weight_sparsity(const Graph& graph);
void fine_tune(Graph& graph, const data::ImageSet& images, int epochs, double learning_rate,
               std::int64_t batch_size, std::uint64_t seed, bool show_progress,
               const std::vector<torch::Tensor>& masks = {});

struct PruneOptions {
  std::string model_path;  // ipj checkpoint, run folder, program/graph file or TorchScript file
  ImportOptions import;    // TorchScript files: --input-shape, --mean/--std
  std::string out_path;
  double sparsity = 0.5;
  bool structured = false;
  int epochs = 1;  // fine-tuning (0 = none)
  double learning_rate = 0.01;
  std::int64_t batch_size = 128;
  std::string data_dir;  // default: the model's data set
  // --resize/--channels/...: on top of the options the model was trained with.
  data::DataOptions data_options;
  std::int64_t train_limit = 0;
  std::int64_t test_limit = 0;
  std::uint64_t seed = 0;
  bool show_progress = true;
};

// Writes the pruned program to out_path and returns the report (accuracy, parameters and MACs before/after,
// "removed_params_fraction", and "warnings": e.g. structured pruning that removed less than half of
// --sparsity, naming what tied the channels; --data of another class or channel count than the model's).
Json run_prune(const PruneOptions& options);

// A LayerProgram from an ipj checkpoint/run folder or an ipj program file, with the data folder it came from.
struct SourceProgram {
  LayerProgram program;
  std::string data_dir;
  data::DataOptions data_options;  // how the model's data was read (--resize, --channels, ...)
  std::string path;
};
SourceProgram load_source_program(const std::string& path);

}  // namespace ipj::quant
