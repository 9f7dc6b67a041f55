// ONNX Runtime through Node.js and the npm package onnxruntime-node (its prebuilt CPU libonnxruntime): the
// runtime ipj checks its ONNX exports on and benchmarks against. Found at $IPJ_ONNXRUNTIME_NODE (the package
// folder, or a node_modules folder holding it), ./node_modules, or a node_modules folder next to (or above)
// the ipj executable. Each run starts one `node` process (~0.1-0.3 s).
#pragma once

#include <torch/types.h>

#include <optional>
#include <string>

namespace ipj::exporter {

struct OnnxRuntimeNode {
  std::string node_binary;  // from PATH
  std::string package_dir;  // .../node_modules/onnxruntime-node
  std::string version;      // the package's version, e.g. "1.30.0"
};

// The runtime, or nullopt with `reason` saying what is missing and how to install it.
std::optional<OnnxRuntimeNode> find_onnxruntime_node(std::string& reason);

struct OnnxRuntimeRun {
  torch::Tensor output;             // [B, ...] float32
  double milliseconds_per_run = 0;  // mean over `timed_runs` after one warm-up run (0 when none)
};

// Runs `model_path` on `input` ([B, ...] float32, fed to the model's first input) with the default session
// options (all graph optimisations, CPU). Throws ipj::Error(runtime) with ONNX Runtime's message on failure.
OnnxRuntimeRun run_onnxruntime(const OnnxRuntimeNode& runtime, const std::string& model_path,
                               const torch::Tensor& input, int timed_runs = 0);

}  // namespace ipj::exporter
