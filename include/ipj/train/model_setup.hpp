// The parts of a training run that depend on where its model comes from (ipj's zoo or a user's TorchScript
// file): building it, the checkpoint's model_info, the resume check of the file, the CPU generator state
// (dropout), and OUT/model.pt, the trained TorchScript file. Used by the trainer and by distillation.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ipj/core/json_io.hpp"
#include "ipj/data/data_record.hpp"
#include "ipj/data/dataset.hpp"
#include "ipj/models/classifier.hpp"
#include "ipj/models/model_source.hpp"
#include "ipj/train/checkpoint.hpp"
#include "ipj/train/train_config.hpp"

namespace ipj::train {

// A user model's trained TorchScript file in the run folder (torch.jit.load runs it unchanged).
inline constexpr const char* kTrainedTorchScriptFileName = "model.pt";
// Its extra file (torch.jit.load(PATH, _extra_files={"ipj.json": ""})): the model_info JSON.
inline constexpr const char* kTorchScriptInfoName = "ipj.json";

// What a TorchScript file that `ipj train` wrote says about its inputs (its ipj.json extra file, `info_text`;
// "" for any other file): fills only what the caller left empty (explicit flags win) with the model_info's
// "model_input_shape" and, when both are empty, "mean" and "std". Throws ipj::Error(invalid_input) naming
// `path` when the text is not such a JSON object.
void fill_inputs_from_trained_info(const std::string& info_text, const std::string& path,
                                   std::vector<std::int64_t>& input_shape, std::vector<float>& mean,
                                   std::vector<float>& std);

// The data a model was trained on: model_info's "data" (data::DataRecord) when it has one; else, for
// checkpoints of older ipj versions, the checkpoint's config "data"/"data_options" with model_info's class
// count and channels (`config` null for TorchScript files: then unknown). Throws ipj::Error(invalid_input)
// naming `path` when the record is damaged.
data::DataRecord trained_data_record(const Json& model_info, const Json& config, const std::string& path);
// The same from the ipj.json text of a TorchScript file ("" or no "data": unknown).
data::DataRecord trained_data_record(const std::string& info_text, const std::string& path);

// The images a data set holds, as the models' input shape.
models::InputShape image_shape(const data::Dataset& dataset);

// What inference needs without the training data (the checkpoint's model_info): "name", "input_shape" [C, H,
// W] of the images, "num_classes", "mean", "std" (images are normalised with them before the model), "data"
// (data::DataRecord: the data set's absolute path, format, channels, resize, mean/std, classes). A file
// adds "source": "torchscript", "file", "file_bytes", "file_xxh3_64" and "model_input_shape" (what forward
// takes per sample: [C, H, W] or [N]).
Json describe_model_source(const models::ModelSource& source, const data::Dataset& dataset);

// The ModelSource that model_info describes (zoo by default, for checkpoints of older ipj versions).
models::ModelSource model_source_from_info(const Json& model_info);

// --resume / inference from a checkpoint: `requested`'s file must be the one the run started from (same size
// and XXH3 hash as recorded in saved_info; the path may be spelt differently), taking the same input shape
// per sample (--input-shape C,H,W of the images equals leaving it out). Nothing for zoo models. Throws
// ipj::Error(usage) naming the file and both fingerprints.
void check_same_model_file(const Json& saved_info, const models::ModelSource& requested,
                           const std::string& checkpoint_path);

// --resume: checks a model file (check_same_model_file) before loading weights into it, loads the checkpoint
// into model and optimizer (load_checkpoint) and restores the CPU generator state.
CheckpointState resume_checkpoint(const std::string& checkpoint_path, const models::ModelSource& source,
                                  models::Classifier& model, torch::optim::Optimizer& optimizer,
                                  const torch::Device& device);

// The CPU generator (dropout masks), saved with each checkpoint so that --resume continues bit-for-bit.
torch::Tensor cpu_generator_state();
void restore_cpu_generator_state(const torch::Tensor& state);

// A LibTorch error while training a user's TorchScript model (backward, optimizer step; forward errors are
// reported by the classifier itself) as ipj::Error(unsupported) naming the file, the reason and the fix.
[[noreturn]] void fail_user_model_step(const TrainConfig& config, const std::exception& error);

// For a TorchScript model: writes <out_dir>/model.pt (the module with the trained weights, contiguous, in
// eval mode, written atomically) with model_info as its ipj.json extra file. Nothing for zoo models.
void write_trained_torchscript(const std::string& out_dir, const models::Classifier& model,
                               const Json& model_info);

}  // namespace ipj::train
