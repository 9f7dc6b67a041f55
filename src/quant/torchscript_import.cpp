// TorchScript -> graph IR. The module is frozen (attributes become constants, methods inlined with their
// call stacks, which give every node its module path), constant-propagated, stripped of shape guards, then
// walked node by node. Values are graph nodes, constants, or the batch size (for x.view(x.size(0), -1)).
#include "ipj/quant/torchscript_import.hpp"

#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/freeze_module.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "import_ops.hpp"
#include "ipj/core/error.hpp"
#include "ipj/core/log.hpp"

namespace ipj::quant {
namespace {

namespace jit = torch::jit;

// "__torch__.torch.nn.modules.conv.___torch_mangle_3.Conv2d" -> "torch.nn.modules.conv.Conv2d"
std::string readable_class(const std::string& qualified) {
  std::string name = std::regex_replace(qualified, std::regex("___torch_mangle_[0-9]+\\."), "");
  const std::string prefix = "__torch__.";
  if (name.rfind(prefix, 0) == 0) name = name.substr(prefix.size());
  return name;
}

bool raises(const jit::Block* block) {
  for (const jit::Node* node : block->nodes())
    if (node->kind() == c10::prim::RaiseException) return true;
  return false;
}

// Where a guard came from: "the model's own forward", or "'bn1' (torch.nn.modules.batchnorm.BatchNorm2d)"
// (torch.nn's own checks of a module's input, e.g. BatchNorm2d's 4-D test), and its code file and line.
std::string guard_place(const jit::Node* guard) {
  const ModulePlace place = module_place(guard);
  const auto location = guard->sourceRange().file_line_col();  // the TorchScript code file and line
  const std::string file = location ? std::get<0>(*location) : "";
  std::string text = !place.path.empty() ? "'" + place.path + "'" +
                                               (place.class_name.empty() ? "" : " (" + place.class_name + ")")
                     : file.find("/torch/nn/") != std::string::npos ? "torch.nn's own code"
                                                                    : "the model's own forward";
  if (location) text += " at " + file + ":" + std::to_string(std::get<1>(*location));
  return text;
}

// `if <shape test>: raise ...` with no outputs: ipj checks input shapes itself, so the guard goes. Returns
// where each one was (guard_place).
std::vector<std::string> remove_shape_guards(const std::shared_ptr<jit::Graph>& graph) {
  std::vector<jit::Node*> guards;
  for (jit::Node* node : graph->nodes()) {
    if (node->kind() != c10::prim::If || !node->outputs().empty()) continue;
    const auto blocks = node->blocks();
    const bool first_empty = blocks[0]->nodes().begin() == blocks[0]->nodes().end();
    const bool second_empty = blocks[1]->nodes().begin() == blocks[1]->nodes().end();
    if ((first_empty && raises(blocks[1])) || (second_empty && raises(blocks[0]))) guards.push_back(node);
  }
  std::vector<std::string> places;
  for (jit::Node* guard : guards) {
    places.push_back(guard_place(guard));
    guard->destroy();
  }
  jit::EliminateDeadCode(graph);
  return places;
}

// "in 'bn1' (...), 'layer1.0.bn1' (...) and 3 more": the distinct places, the first three named.
std::string guard_places_text(const std::vector<std::string>& places) {
  std::vector<std::string> distinct;
  for (const std::string& place : places)
    if (std::find(distinct.begin(), distinct.end(), place) == distinct.end()) distinct.push_back(place);
  std::string text = "in ";
  for (std::size_t index = 0; index < std::min<std::size_t>(distinct.size(), 3); ++index)
    text += (index > 0 ? ", " : "") + distinct[index];
  if (distinct.size() > 3) text += " and " + std::to_string(distinct.size() - 3) + " more";
  return text;
}

std::shared_ptr<jit::Graph> frozen_forward(const jit::Module& module, const std::string& where) {
  jit::Module copy = module.clone();
  copy.eval();
  std::shared_ptr<jit::Graph> graph;
  try {
    jit::Module frozen = jit::freeze_module(copy);
    graph = frozen.get_method("forward").graph()->copy();
  } catch (const c10::Error& error) {
    fail(ErrorCategory::unsupported,
         "'" + where + "': LibTorch cannot freeze this module: " + error.what_without_backtrace());
  }
  jit::ConstantPropagation(graph);
  // Said, not silent: a guard may test more than the per-sample shape ipj checks (the batch size, values).
  if (const std::vector<std::string> removed = remove_shape_guards(graph); !removed.empty())
    spdlog::info(
        "'{}': {} input check(s) (`if ...: raise`: an assert, or torch.nn's own test of a layer's input) {} "
        "do not run in ipj's graph (int8, pruning, export): ipj checks the per-sample input shape itself, "
        "not the batch size or values",
        where, removed.size(), guard_places_text(removed));
  return graph;
}

}  // namespace

ModulePlace module_place(const jit::Node* node) {
  ModulePlace place;
  if (const auto stack = node->callstack()) {
    for (const auto& entry : (*stack)->vec()) {
      const auto& instance = std::get<2>(entry);
      if (!instance) continue;
      if (instance->class_type())
        place.class_name = readable_class(instance->class_type()->name()->qualifiedName());
      const std::string name = instance->instance_name();
      if (name != "SELF" && !name.empty()) place.path += (place.path.empty() ? "" : ".") + name;
    }
  }
  return place;
}

Graph import_torchscript(const jit::Module& module, const std::string& where, const ImportOptions& options) {
  if (options.input_shape.empty())
    fail(ErrorCategory::usage, "'" + where + "': TorchScript models need --input-shape (e.g. 1,28,28)");
  if (options.mean.size() != options.std.size())
    fail(ErrorCategory::usage, "--mean and --std need the same number of values");
  const std::shared_ptr<jit::Graph> graph = frozen_forward(module, where);
  Graph result = walk_torchscript_graph(*graph, where, options.input_shape);
  result.model_name = module.type()->name() ? readable_class(module.type()->name()->qualifiedName())
                                            : std::string("torchscript");
  result.input_mean = options.mean;
  result.input_std = options.std;
  if (!options.mean.empty()) {
    const std::size_t channels = options.input_shape.size() == 1 ? 1 : options.input_shape[0];
    if (options.mean.size() != channels && options.mean.size() != 1)
      fail(ErrorCategory::usage,
           options.input_shape.size() == 1
               ? "--mean/--std: ipj's graph IR (int8, pruning, ONNX export, XNNPACK's runtime) takes one "
                 "value "
                 "for a flat input, not " +
                     std::to_string(options.mean.size()) +
                     " (per-feature values run in bench and serve on the module as it is)"
               : "--mean/--std need one value per input channel (" + std::to_string(channels) +
                     ") or one value");
    if (options.mean.size() == 1 && channels > 1) {
      result.input_mean.assign(channels, options.mean[0]);
      result.input_std.assign(channels, options.std[0]);
    }
  }
  fuse_activations(result);
  fold_input_normalization(result);
  validate_graph(result, where);
  {
    torch::NoGradGuard no_grad;
    std::vector<std::int64_t> shape{2};
    shape.insert(shape.end(), options.input_shape.begin(), options.input_shape.end());
    torch::Tensor output;
    try {
      output = run_graph(result, torch::rand(shape));
    } catch (const c10::Error& error) {
      fail(ErrorCategory::invalid_input,
           "'" + where +
               "': the imported graph does not run on --input-shape: " + error.what_without_backtrace());
    }
    if (output.dim() != 2)
      fail(ErrorCategory::unsupported,
           "'" + where + "': the model returns a " + std::to_string(output.dim()) +
               "-D tensor; ipj's graph IR (int8, pruning, the XNNPACK and oneDNN runtimes) takes classifiers "
               "([B, classes]); the model still runs as fp32 (eager or frozen), bf16 or jit");
    result.num_classes = options.num_classes > 0 ? options.num_classes : static_cast<int>(output.size(1));
  }
  return result;
}

Graph import_torchscript_file(const std::string& path, const ImportOptions& options) {
  jit::Module module;
  try {
    module = jit::load(path);
  } catch (const c10::Error& error) {
    fail(ErrorCategory::invalid_input,
         "'" + path + "' is not a loadable TorchScript file: " + error.what_without_backtrace());
  }
  return import_torchscript(module, path, options);
}

double import_difference(const jit::Module& module, const Graph& graph, const ImportOptions& options,
                         const torch::Tensor& pixels) {
  torch::NoGradGuard no_grad;
  std::vector<std::int64_t> shape{pixels.size(0)};
  shape.insert(shape.end(), options.input_shape.begin(), options.input_shape.end());
  torch::Tensor x = pixels.to(torch::kFloat).reshape(shape);
  if (!options.mean.empty()) {
    std::vector<std::int64_t> view(static_cast<std::size_t>(x.dim()), 1);
    view[1] = options.mean.size() == 1 ? 1 : -1;
    x = (x - torch::tensor(options.mean).view(view)) / torch::tensor(options.std).view(view);
  }
  jit::Module copy = module.clone();
  copy.eval();
  torch::Tensor expected;
  try {
    expected = copy.forward({x}).toTensor().to(torch::kFloat);
  } catch (const std::exception& error) {  // the model's own check or failure, e.g. on the batch size
    fail(ErrorCategory::invalid_input,
         "the model fails on a batch of shape " + c10::str(x.sizes()) +
             " (ipj's check of its imported graph): " + error_cause(error.what()) +
             "; ipj runs models on batches of images: make its forward accept any batch size, and check "
             "--input-shape");
  }
  const torch::Tensor actual = run_graph(graph, pixels);
  const double scale = std::max(expected.abs().max().item<double>(), 1e-12);
  return (actual - expected).abs().max().item<double>() / scale;
}

}  // namespace ipj::quant
