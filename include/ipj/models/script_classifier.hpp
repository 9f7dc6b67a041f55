// A user's TorchScript module (torch.jit.script / torch.jit.trace, saved by Python) as an ipj Classifier:
// the module's own parameter and buffer tensors are registered (same tensors, same dotted names), so the
// optimizer, channels-last re-layout, checkpoints and BatchNorm statistics all act on the scripted module.
// Limits: one tensor in, one [B, classes] tensor out; parameters are trained where requires_grad is set.
#pragma once

#include <torch/csrc/jit/api/module.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ipj/models/classifier.hpp"
#include "ipj/models/model_source.hpp"

namespace ipj::models {

class ScriptClassifier : public Classifier {
 public:
  // sample_shape: what the module takes per sample ({C, H, W}, or {N}: batches are flattened to [B, N]).
  // `path` names the file in error messages.
  ScriptClassifier(torch::jit::Module module, std::vector<std::int64_t> sample_shape, std::string path);

  // x: [B, C, H, W] normalised images -> logits [B, classes]. A failure inside the module throws
  // ipj::Error(invalid_input) naming the file and the batch shape.
  torch::Tensor forward(torch::Tensor x) override;
  // Switches the scripted module's training flag too (BatchNorm, dropout).
  void train(bool on = true) override;

  const std::vector<std::int64_t>& sample_shape() const { return sample_shape_; }
  const std::string& path() const { return path_; }
  // The scripted module itself (its tensors are this classifier's parameters and buffers).
  const torch::jit::Module& module() const { return module_; }

  // Writes the module with its current weights (contiguous, eval mode) to `path` atomically, as a TorchScript
  // file that Python's torch.jit.load runs unchanged; `extra_files` go into its extra/ folder.
  void save_torchscript(const std::string& path, const std::map<std::string, std::string>& extra_files) const;

 private:
  torch::jit::Module module_;
  std::vector<std::int64_t> sample_shape_;
  std::string path_;
};

// Loads a TorchScript file to train it. Throws ipj::Error: io (missing), invalid_input (not TorchScript, an
// ipj checkpoint, no forward method, no trainable parameters), each naming the file and the fix.
torch::jit::Module load_trainable_module(const std::string& path);

// The classifier of source.file for images of `data_shape` and `num_classes` classes: checks
// source.input_shape against the images (usage error) and, with one forward pass in eval mode on zeros, that
// the module takes them and returns [B, num_classes] (invalid_input naming the file otherwise).
std::shared_ptr<ScriptClassifier> create_script_classifier(const ModelSource& source, InputShape data_shape,
                                                           int num_classes);

}  // namespace ipj::models
