// TorchScript modules as they are: loading with their inputs, running on pixels, the operator census (a
// RecordFunction observer counting top-level dispatcher calls), magnitude pruning, fine-tuning and saving.
// The int8 rewrite is in script_dynamic.cpp.
#include "ipj/quant/script_model.hpp"

#include <ATen/record_function.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "ipj/core/atomic_file.hpp"
#include "ipj/core/checked_file.hpp"
#include "ipj/core/error.hpp"
#include "ipj/train/model_setup.hpp"
#include "program_training.hpp"

namespace ipj::quant {
namespace {

std::string first_line(const std::exception& error) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&error);
  const std::string text = c10_error ? c10_error->what_without_backtrace() : error.what();
  return text.substr(0, text.find('\n'));
}

}  // namespace

torch::Tensor script_input(const ImportOptions& import, const torch::Tensor& pixels) {
  std::vector<std::int64_t> shape{pixels.size(0)};
  shape.insert(shape.end(), import.input_shape.begin(), import.input_shape.end());
  // [B, ...input_shape] first (pixels of a flat model), then normalised by the one rule for every path
  return normalize_by_dim1(pixels.to(torch::kFloat).reshape(shape), import.mean, import.std);
}

namespace {

// The census observer: thread-local state, since RecordFunction callbacks are plain function pointers.
struct Census {
  int depth = 0;
  std::map<std::string, std::int64_t> counts;
  std::set<std::string> reads_quantized;  // ops seen with a quantized tensor input
  std::int64_t macs = 0;
};
thread_local Census* active_census = nullptr;

struct CensusContext : at::ObserverContext {};

std::unique_ptr<at::ObserverContext> census_enter(const at::RecordFunction& call) {
  if (active_census != nullptr) {
    if (active_census->depth == 0) {
      ++active_census->counts[call.name()];
      for (const c10::IValue& input : call.inputs())
        if (input.isTensor() && input.toTensor().defined() && input.toTensor().is_quantized())
          active_census->reads_quantized.insert(call.name());
    }
    ++active_census->depth;
  }
  return std::make_unique<CensusContext>();
}

// Multiply-accumulates of a finished top-level conv, linear or matmul call (0 for anything else).
std::int64_t call_macs(const at::RecordFunction& call) {
  const std::string name = call.name();
  const auto inputs = call.inputs();
  const auto& outputs = call.outputs();
  if (inputs.size() < 2 || outputs.empty() || !outputs[0].isTensor() || !inputs[0].isTensor() ||
      !inputs[1].isTensor())
    return 0;
  const torch::Tensor& out = outputs[0].toTensor();
  const torch::Tensor& a = inputs[0].toTensor();
  const torch::Tensor& w = inputs[1].toTensor();
  if (name == "aten::linear" && w.dim() == 2) return out.numel() * w.size(1);
  if (name.rfind("aten::conv", 0) == 0 && w.dim() >= 3) return out.numel() * (w.numel() / w.size(0));
  if ((name == "aten::matmul" || name == "aten::mm" || name == "aten::bmm") && a.dim() >= 2)
    return out.numel() * a.size(-1);
  return 0;
}

void census_exit(const at::RecordFunction& call, at::ObserverContext*) {
  if (active_census == nullptr) return;
  if (--active_census->depth == 0) active_census->macs += call_macs(call);
}

enum class OpClass { int8, float_op, border };

OpClass classify(const std::string& op, const Census& census) {
  if (op == "aten::quantize_per_tensor" || op == "aten::dequantize") return OpClass::border;
  return op.rfind("quantized::", 0) == 0 || census.reads_quantized.count(op) ? OpClass::int8
                                                                             : OpClass::float_op;
}

std::vector<OpCount> sorted_counts(const Census& census, OpClass wanted) {
  std::vector<OpCount> result;
  for (const auto& [op, count] : census.counts)
    if (classify(op, census) == wanted) result.push_back({op, count});
  std::stable_sort(result.begin(), result.end(),
                   [](const OpCount& a, const OpCount& b) { return a.count > b.count; });
  return result;
}

}  // namespace

ScriptSource load_script_source(const std::string& path, const ImportOptions& given) {
  ScriptSource source;
  source.module = std::make_shared<torch::jit::Module>();
  torch::jit::ExtraFilesMap extra_files{{train::kTorchScriptInfoName, ""}};
  load_file_checked(path, "TorchScript file",
                    [&] { *source.module = torch::jit::load(path, c10::nullopt, extra_files); });
  if (!source.module->find_method("forward"))
    fail(ErrorCategory::invalid_input,
         "'" + path + "' has no forward method (save a scripted or traced module)");
  source.module->eval();
  source.import = given;
  const std::string& info_text = extra_files[train::kTorchScriptInfoName];
  train::fill_inputs_from_trained_info(info_text, path, source.import.input_shape, source.import.mean,
                                       source.import.std);
  if (!info_text.empty()) source.info = Json::parse(info_text);  // parsed above without error
  if (!source.info.is_object()) source.info = Json::object();
  if (source.import.input_shape.empty())
    fail(ErrorCategory::usage,
         "'" + path +
             "' is a TorchScript file: give what its forward takes per sample with --input-shape "
             "(e.g. 1,28,28 or 784)");
  if (source.import.mean.size() != source.import.std.size())
    fail(ErrorCategory::usage, "--mean and --std need the same number of values");
  source.path = path;
  return source;
}

torch::Tensor run_script(const torch::jit::Module& module, const ImportOptions& import,
                         const torch::Tensor& pixels, const std::string& where) {
  c10::IValue output;
  const torch::Tensor x = script_input(import, pixels);
  try {
    output = const_cast<torch::jit::Module&>(module).forward({x});  // forward does not mutate the module
  } catch (const std::exception& error) {
    fail(ErrorCategory::invalid_input, "'" + where + "' failed on a batch of shape " + c10::str(x.sizes()) +
                                           ": " + error_cause(error.what()) + "; check --input-shape");
  }
  if (!output.isTensor() || output.toTensor().dim() != 2)
    fail(ErrorCategory::invalid_input,
         "'" + where + "' returned " +
             (output.isTensor() ? c10::str(output.toTensor().sizes()) : output.tagKind()) +
             "; ipj quantizes and prunes classifiers that return one [batch, classes] tensor");
  return output.toTensor().to(torch::kFloat);
}

OpCensus census_ops(const torch::jit::Module& module, const ImportOptions& import,
                    const torch::Tensor& pixels, const std::string& where) {
  torch::NoGradGuard no_grad;
  run_script(module, import, pixels.slice(0, 0, 1), where);  // checks the output; not counted
  const torch::Tensor x = script_input(import, pixels);      // ipj's preprocessing: not counted either
  Census census;
  active_census = &census;
  const at::CallbackHandle handle =
      at::addThreadLocalCallback(at::RecordFunctionCallback(census_enter, census_exit)
                                     .needsInputs(true)
                                     .needsOutputs(true)
                                     .scopes({at::RecordScope::FUNCTION}));
  try {
    const_cast<torch::jit::Module&>(module).forward({x});  // forward does not mutate the module
  } catch (...) {
    at::removeCallback(handle);
    active_census = nullptr;
    throw;
  }
  at::removeCallback(handle);
  active_census = nullptr;
  OpCensus result;
  result.int8_ops = sorted_counts(census, OpClass::int8);
  result.float_ops = sorted_counts(census, OpClass::float_op);
  result.border_ops = sorted_counts(census, OpClass::border);
  result.macs_per_sample = pixels.size(0) > 0 ? census.macs / pixels.size(0) : 0;
  return result;
}

Json to_json(const std::vector<OpCount>& ops) {
  Json list = Json::array();
  for (const OpCount& entry : ops)
    list.push_back({{"op", entry.op}, {"count", entry.count}});
  return list;
}

ScriptPruning prune_script_magnitude(torch::jit::Module& module, double sparsity) {
  if (!(sparsity >= 0.0 && sparsity < 1.0)) fail(ErrorCategory::usage, "--sparsity must be in [0, 1)");
  torch::NoGradGuard no_grad;
  ScriptPruning pruning;
  for (const auto& parameter : module.named_parameters(/*recurse=*/true)) {
    pruning.total_params += parameter.value.numel();
    const std::string& name = parameter.name;
    const bool is_weight = name.size() >= 6 && name.compare(name.size() - 6, 6, "weight") == 0;
    if (!is_weight || parameter.value.dim() < 2 || !parameter.value.is_floating_point()) continue;
    torch::Tensor weight = parameter.value;
    const auto pruned_count = static_cast<std::int64_t>(std::floor(weight.numel() * sparsity));
    torch::Tensor mask = torch::ones_like(weight);
    if (pruned_count > 0) {
      const torch::Tensor order = weight.detach().abs().reshape({-1}).argsort();
      mask.view({-1}).index_fill_(0, order.slice(0, 0, pruned_count), 0.0);
    }
    weight.mul_(mask);
    pruning.zeroed += pruned_count;
    pruning.weights.push_back(weight);
    pruning.masks.push_back(mask);
    pruning.names.push_back(name);
  }
  return pruning;
}

double script_weight_sparsity(const ScriptPruning& pruning) {
  std::int64_t zeros = 0, total = 0;
  for (const torch::Tensor& weight : pruning.weights) {
    zeros += weight.eq(0).sum().item<std::int64_t>();
    total += weight.numel();
  }
  return total > 0 ? static_cast<double>(zeros) / static_cast<double>(total) : 0.0;
}

void fine_tune_script(torch::jit::Module& module, const ImportOptions& import, const data::ImageSet& images,
                      int epochs, double learning_rate, std::int64_t batch_size, std::uint64_t seed,
                      bool show_progress, const ScriptPruning& pruning) {
  std::vector<torch::Tensor> parameters;
  for (torch::Tensor parameter : module.parameters()) {
    if (!parameter.is_leaf()) parameter.detach_();  // a copy made with autograd on: train it as a leaf
    parameter.set_requires_grad(true);
    parameters.push_back(parameter);
  }
  module.train();
  const PixelTraining settings{epochs, learning_rate, batch_size, seed, "fine-tune", show_progress};
  auto loss = [&](const data::Batch& batch, const train::StepContext&) {
    const torch::Tensor logits = module.forward({script_input(import, batch.images)}).toTensor();
    return train::StepLoss{torch::nn::functional::cross_entropy(logits, batch.labels), logits};
  };
  auto keep_pruned_weights_at_zero = [&] {
    torch::NoGradGuard no_grad;
    for (std::size_t index = 0; index < pruning.weights.size(); ++index)
      pruning.weights[index].mul_(pruning.masks[index]);
  };
  try {
    train_on_pixels(images, settings, parameters, loss, keep_pruned_weights_at_zero);
  } catch (const c10::Error& error) {
    module.eval();
    fail(ErrorCategory::unsupported, "fine-tuning the TorchScript model failed inside LibTorch: " +
                                         first_line(error) + "; use --epochs 0 to prune without it");
  }
  module.eval();
}

std::int64_t script_parameter_count(const torch::jit::Module& module) {
  std::int64_t count = 0;
  for (const torch::Tensor& parameter : module.parameters())
    count += parameter.numel();
  return count;
}

void save_script(const torch::jit::Module& module, const std::string& path, const Json& info) {
  const torch::jit::ExtraFilesMap extra{{train::kTorchScriptInfoName, info.dump()}};
  replace_file_atomically(path, [&](const std::string& temporary) {
    try {
      write_through_memory(temporary, path, [&](std::ostream& out) { module.save(out, extra); });
    } catch (const c10::Error& error) {
      fail(ErrorCategory::io, "cannot write the TorchScript file '" + path + "': " + first_line(error));
    }
  });
}

}  // namespace ipj::quant
