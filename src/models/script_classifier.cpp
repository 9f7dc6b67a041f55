// ScriptClassifier: a torch::jit::Module behind the Classifier interface, its tensors registered in a mirror
// of its module tree; loading with clear errors; the probe that checks input shape and class count.
#include "ipj/models/script_classifier.hpp"

#include <torch/script.h>
#include <torch/torch.h>

#include <filesystem>
#include <sstream>
#include <unordered_set>

#include "ipj/core/atomic_file.hpp"
#include "ipj/core/error.hpp"
#include "ipj/core/torch_compat.hpp"
#include "ipj/models/catalog.hpp"

namespace ipj::models {
namespace {

std::string shape_text(at::IntArrayRef shape, const char* separator = ", ") {
  std::string text;
  for (const std::int64_t size : shape)
    text += (text.empty() ? "" : separator) + std::to_string(size);
  return text;
}

// The useful line of a LibTorch error: TorchScript interpreter errors end with the Python-style
// "RuntimeError: ..." line after a traceback; other errors put it first.
std::string torch_reason(const std::exception& error) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&error);
  const std::string text = c10_error ? c10_error->what_without_backtrace() : error.what();
  std::vector<std::string> lines;
  std::stringstream stream(text);
  for (std::string line; std::getline(stream, line);) {
    const auto first = line.find_first_not_of(" \t");
    if (first != std::string::npos) lines.push_back(line.substr(first));
  }
  if (lines.empty()) return "unknown LibTorch error";
  const bool traceback = text.find("Traceback of TorchScript") != std::string::npos;
  return traceback ? lines.back() : lines.front();
}

// Registers the parameters and buffers of `module` (not its children) on `holder` under their own names,
// then mirrors each child module as a child of `holder`: dotted names come out as in Python's state_dict.
// A tensor shared by two modules (tied weights) is registered once, as Python's parameters() yields it once.
void register_tree(torch::nn::Module& holder, const torch::jit::Module& module,
                   std::unordered_set<const c10::TensorImpl*>& seen) {
  for (const auto& parameter : module.named_parameters(/*recurse=*/false)) {
    if (!seen.insert(parameter.value.unsafeGetTensorImpl()).second) continue;
    holder.register_parameter(parameter.name, parameter.value, parameter.value.requires_grad());
  }
  for (const auto& buffer : module.named_buffers(/*recurse=*/false)) {
    if (!buffer.value.defined() || !seen.insert(buffer.value.unsafeGetTensorImpl()).second) continue;
    holder.register_buffer(buffer.name, buffer.value);
  }
  for (const auto& child : module.named_children()) {
    auto mirror = std::make_shared<torch::nn::Module>(child.name);
    register_tree(*mirror, child.value, seen);
    holder.register_module(child.name, mirror);
  }
}

const char* ipj_file_kind(const torch::jit::Module& module) {
  if (module.hasattr("ipj_checkpoint_format")) return "an ipj training checkpoint";
  if (module.hasattr("ipj_int8_format")) return "an ipj int8 model file";
  if (module.hasattr("ipj_program_format")) return "an ipj program file";
  return nullptr;
}

std::vector<std::int64_t> resolve_sample_shape(const ModelSource& source, const InputShape& data) {
  const std::vector<std::int64_t> images{data.channels, data.height, data.width};
  const std::string images_text = shape_text(images, "x");
  const std::string given = shape_text(source.input_shape, ",");
  if (source.input_shape.empty()) return images;
  if (source.input_shape.size() == 3) {
    if (source.input_shape == images) return images;
    fail(ErrorCategory::usage, "--input-shape " + given + " does not match the data set's images (" +
                                   images_text + "); ipj does not resize: give --input-shape " +
                                   shape_text(images, ",") + " (or " + std::to_string(data.flat_size()) +
                                   " for a model that takes flat vectors), or data of that shape");
  }
  if (source.input_shape.size() == 1) {
    if (source.input_shape[0] == data.flat_size()) return source.input_shape;
    fail(ErrorCategory::usage, "--input-shape " + given + " is not the size of the data set's images (" +
                                   images_text + " = " + std::to_string(data.flat_size()) +
                                   " values); give --input-shape " + std::to_string(data.flat_size()) +
                                   " or " + shape_text(images, ","));
  }
  fail(ErrorCategory::usage, "--input-shape " + given +
                                 ": give C,H,W (e.g. 1,28,28) or one flat size (e.g. 784), not " +
                                 std::to_string(source.input_shape.size()) + " numbers");
}

// One forward pass in eval mode without autograd (BatchNorm statistics and the mode stay as they were).
void check_output(ScriptClassifier& classifier, const InputShape& data, int num_classes) {
  torch::NoGradGuard no_grad;
  const bool was_training = classifier.is_training();
  classifier.eval();
  const torch::Tensor logits = classifier.forward(torch::zeros({2, data.channels, data.height, data.width}));
  classifier.train(was_training);
  if (logits.dim() != 2 || logits.size(0) != 2)
    fail(ErrorCategory::invalid_input,
         "model '" + classifier.path() + "' returns a tensor of shape [" + shape_text(logits.sizes()) +
             "] for a batch of 2 images; ipj trains classifiers that return logits [B, classes]");
  if (!logits.is_floating_point())
    fail(ErrorCategory::invalid_input, "model '" + classifier.path() + "' returns " +
                                           std::string(c10::toString(logits.scalar_type())) +
                                           " values; ipj trains classifiers that return float logits");
  if (logits.size(1) != num_classes)
    fail(ErrorCategory::invalid_input,
         "model '" + classifier.path() + "' outputs " + std::to_string(logits.size(1)) +
             " classes but the data set has " + std::to_string(num_classes) + "; change its last layer to " +
             std::to_string(num_classes) + " outputs, or train it on data with " +
             std::to_string(logits.size(1)) + " classes");
}

}  // namespace

ScriptClassifier::ScriptClassifier(torch::jit::Module module, std::vector<std::int64_t> sample_shape,
                                   std::string path)
    : module_(std::move(module)), sample_shape_(std::move(sample_shape)), path_(std::move(path)) {
  std::unordered_set<const c10::TensorImpl*> seen;
  register_tree(*this, module_, seen);
  torch::nn::Module::train(module_.is_training());
}

torch::Tensor ScriptClassifier::forward(torch::Tensor x) {
  if (sample_shape_.size() == 1) x = x.reshape({x.size(0), sample_shape_[0]});  // [B, C*H*W]
  c10::IValue output;
  try {
    output = module_.forward({x});
  } catch (const std::exception& error) {
    fail(ErrorCategory::invalid_input,
         "model '" + path_ + "' failed on a batch of shape [" + shape_text(x.sizes()) +
             "]: " + torch_reason(error) + "; check that it takes the data set's images (per sample " +
             shape_text(sample_shape_, "x") + "; --input-shape N feeds flat vectors)" +
             (compat::cpu_autocast_enabled() ? ", or train in --precision fp32 (this ran under bf16 autocast)"
                                             : ""));
  }
  if (!output.isTensor())
    fail(ErrorCategory::invalid_input,
         "model '" + path_ + "' returned a " + output.tagKind() +
             "; ipj trains modules that return one tensor of logits [B, classes]");
  return output.toTensor();  // [B, classes]
}

void ScriptClassifier::train(bool on) {
  torch::nn::Module::train(on);
  module_.train(on);
}

void ScriptClassifier::save_torchscript(const std::string& path,
                                        const std::map<std::string, std::string>& extra_files) const {
  torch::jit::Module copy = module_.deepcopy();  // own tensors: the layout change below leaves training alone
  copy.eval();
  {
    torch::NoGradGuard no_grad;
    for (auto parameter : copy.parameters())
      if (!parameter.is_contiguous()) parameter.set_data(parameter.contiguous());
    for (auto buffer : copy.buffers())
      if (buffer.defined() && !buffer.is_contiguous()) buffer.set_data(buffer.contiguous());
  }
  const torch::jit::ExtraFilesMap extra(extra_files.begin(), extra_files.end());
  replace_file_atomically(path, [&](const std::string& temporary) {
    try {
      write_through_memory(temporary, path, [&](std::ostream& out) { copy.save(out, extra); });
    } catch (const std::exception& error) {
      fail(ErrorCategory::io, "cannot write TorchScript file '" + path + "': " + torch_reason(error));
    }
  });
}

torch::jit::Module load_trainable_module(const std::string& path) {
  const std::string how_to_save =
      "save the model in Python with torch.jit.script(model).save(PATH) or torch.jit.trace(model, "
      "example).save(PATH)";
  if (!std::filesystem::exists(path))
    fail(ErrorCategory::io, "no model file at '" + path + "'; " + how_to_save);
  if (std::filesystem::is_directory(path))
    fail(ErrorCategory::usage, "'" + path +
                                   "' is a folder; --model takes a TorchScript file (a run folder's " +
                                   "trained model is RUN/model.pt)");
  torch::jit::Module module;
  try {
    module = torch::jit::load(path);
  } catch (const std::exception& error) {
    fail(ErrorCategory::invalid_input,
         "'" + path + "' is not a TorchScript file (" + torch_reason(error) + "); " + how_to_save);
  }
  if (const char* kind = ipj_file_kind(module))
    fail(ErrorCategory::invalid_input, "'" + path + "' is " + kind +
                                           ", not a TorchScript model; to continue a run use ipj train --out "
                                           "RUN --resume, a trained user model is RUN/model.pt");
  if (!module.find_method("forward"))
    fail(ErrorCategory::invalid_input, "'" + path + "' has no forward method; " + how_to_save);
  std::int64_t trainable = 0;
  for (const auto& parameter : module.parameters())
    trainable += parameter.requires_grad() ? 1 : 0;
  if (trainable == 0)
    fail(
        ErrorCategory::invalid_input,
        "'" + path +
            "' has no trainable parameters (a module without weights, all requires_grad=False, or one frozen "
            "by torch.jit.freeze, whose weights became constants); save the module before freezing it");
  return module;
}

std::shared_ptr<ScriptClassifier> create_script_classifier(const ModelSource& source, InputShape data_shape,
                                                           int num_classes) {
  if (!source.is_file()) fail(ErrorCategory::internal, "create_script_classifier needs a file source");
  std::vector<std::int64_t> sample_shape = resolve_sample_shape(source, data_shape);
  auto classifier = std::make_shared<ScriptClassifier>(load_trainable_module(source.file),
                                                       std::move(sample_shape), source.file);
  check_output(*classifier, data_shape, num_classes);
  return classifier;
}

bool is_convolutional(const ModelSource& source) {
  if (!source.is_file()) return model_entry(source.zoo_name).convolutional;
  for (const auto& parameter : load_trainable_module(source.file).parameters())
    if (parameter.dim() == 4) return true;
  return false;
}

}  // namespace ipj::models
