// Static int8 of any TorchScript module as it is (the fallback of `ipj quantize
// --mode static` when the graph importer refuses an operator). Supported regions (conv2d, linear, add, with
// relu/pooling/flatten between them) run in PyTorch's quantized TorchScript form; every other op stays float.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ipj/data/dataset.hpp"
#include "ipj/quant/observer.hpp"
#include "ipj/quant/torchscript_import.hpp"

namespace torch::jit {
struct Module;
}

namespace ipj::quant {

// The border rule (docs/INFERENCE.md, measured at batch 64 on oneDNN): a connected int8 region is kept only
// when its multiply-accumulates per sample pay for what it adds: each element quantized or dequantized at
// its borders costs about as much time as int8 saves on this many MACs, and each int8 kernel call has a
// fixed cost worth this many MACs per sample.
constexpr double kBorderMacsPerElement = 200.0;
constexpr double kMacsPerInt8Call = 16000.0;

struct StaticScriptOptions {
  std::string engine = "auto";  // select_quantized_engine's names
  ObserverKind observer = ObserverKind::minmax;
  double percentile = 99.99;
  std::int64_t calib_samples = 1000;
  std::int64_t batch_size = 128;
  bool every_region = false;  // true: keep every supported region (no border rule)
};

struct StaticScript {
  std::shared_ptr<torch::jit::Module> module;  // frozen; forward runs quantized::* ops in its int8 regions
  std::string engine;                          // the engine the weights were packed for
  std::int64_t int8_layers = 0;                // conv2d/linear calls now in int8
  std::vector<std::string> float_layers;       // conv2d/linear calls left float, with the reason
  std::int64_t regions = 0;                    // connected int8 regions
  std::int64_t fp32_bytes = 0;                 // float parameters and buffers of the source module
  std::int64_t int8_bytes = 0;                 // the frozen constants left + int8 weights, scales, biases
  std::vector<std::string> warnings;           // e.g. a plan that LibTorch could not run, so simplified
};

// Freezes a copy of `module` (BN folded), observes the inputs and outputs of its int8 candidates on the
// first calib_samples of `calibration` (pixels normalised as run_script does), keeps the regions the border
// rule accepts, and rewrites forward: aten::quantize_per_tensor at float->int8 borders, quantized::conv2d(
// _relu) / quantized::linear(_relu) with prepacked per-channel int8 weights (module attributes), quantized::
// add(_relu) when both operands are int8, relu/pooling/flatten on quantized tensors, aten::dequantize before
// every float consumer. Never refuses an operator; throws ipj::Error(unsupported) only when LibTorch cannot
// freeze the module.
StaticScript quantize_script_static(const torch::jit::Module& module, const ImportOptions& import,
                                    const data::ImageSet& calibration, const StaticScriptOptions& options,
                                    const std::string& where);

// Bytes quantize_script_static added to a module: its packed int8 weights (+ per-channel scales, float
// biases) and the tensor constants of its frozen forward (the float weights left). 0 for other modules.
std::int64_t static_script_bytes(const torch::jit::Module& module);

}  // namespace ipj::quant
