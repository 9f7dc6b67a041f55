// Training checkpoints: model weights + buffers, optimizer state, the config and the metrics so far, in one
// LibTorch archive written atomically (temp file + rename) so a crash never leaves a torn checkpoint.
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <string>

#include "ipj/core/json_io.hpp"
#include "ipj/models/classifier.hpp"

namespace ipj::train {

inline constexpr const char* kCheckpointFileName = "checkpoint.pt";
// 2: the layout of 1, always sealed with a checksum (core/checked_file.hpp); format 1 files are still read.
inline constexpr int kCheckpointFormatVersion = 2;

struct CheckpointState {
  int completed_epochs = 0;
  Json config;                             // TrainConfig as JSON
  Json epoch_metrics;                      // list of per-epoch objects so far
  double loss_scale = 0.0;                 // GradScaler scale (0 = no scaler in this run)
  std::int64_t scaler_growth_tracker = 0;  // GradScaler clean steps since the last growth
  // What inference needs without the training data: {"name", "input_shape": [C, H, W], "num_classes",
  // "mean": [...], "std": [...]} (pixels in [0,1] are normalised with mean/std before the model).
  Json model_info;
  // The CPU generator at the end of the epoch (dropout masks of user models; --resume restores it).
  // Undefined in checkpoints of older ipj versions.
  torch::Tensor generator_state;
};

void save_checkpoint(const std::string& path, const torch::nn::Module& model,
                     const torch::optim::Optimizer& optimizer, const CheckpointState& state);

// Loads into existing model/optimizer objects of the same architecture. Throws ipj::Error(invalid_input)
// naming the file when it is not an ipj checkpoint or does not fit the model. Tensors are loaded onto
// `device` (where the model already is), optimizer state included.
CheckpointState load_checkpoint(const std::string& path, torch::nn::Module& model,
                                torch::optim::Optimizer& optimizer,
                                const torch::Device& device = torch::kCPU);

// Reads only the metadata (no model needed): for tools that inspect a run folder.
CheckpointState read_checkpoint_state(const std::string& path);

// Loads the weights into `model` (same architecture), without an optimizer: for inference tools.
// Throws ipj::Error(invalid_input) naming the file when it is not an ipj checkpoint or does not fit.
CheckpointState load_checkpoint_weights(const std::string& path, torch::nn::Module& model);

// A trained model ready for inference (eval mode) with its checkpoint metadata. `path` is a checkpoint file
// or a run folder holding checkpoint.pt. Throws ipj::Error(invalid_input) for foreign or damaged files.
struct TrainedModel {
  models::ClassifierPtr model;
  CheckpointState state;
  std::string path;  // the checkpoint file actually read
};
TrainedModel load_trained_model(const std::string& path);

}  // namespace ipj::train
