// Any TorchScript module as it is, without ipj's graph importer: load it with its inputs, run it on pixels,
// count the operators that ran, quantize its nn.Linear layers dynamically to int8 (as PyTorch's
// torch.ao.quantization.quantize_dynamic does) and prune its weights by magnitude. Other layers stay float.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ipj/core/json_io.hpp"
#include "ipj/data/dataset.hpp"
#include "ipj/quant/torchscript_import.hpp"

namespace torch::jit {
struct Module;
}

namespace ipj::quant {

struct ScriptSource {
  std::shared_ptr<torch::jit::Module> module;  // in eval mode
  ImportOptions import;  // input shape per sample (required), mean/std (flags, else the file's ipj.json)
  std::string path;
  Json info = Json::object();  // the file's ipj.json extra file ({} when it has none)
};

// Loads a TorchScript file (ipj::Error(invalid_input) when it is not one), fills the inputs the flags left
// empty from its ipj.json, and requires an input shape (ipj::Error(usage) naming --input-shape).
ScriptSource load_script_source(const std::string& path, const ImportOptions& given);

// module((pixels - mean) / std), pixels [B, C, H, W] in [0, 1] reshaped to [B, ...input_shape]. Throws
// ipj::Error(invalid_input) naming `where` when the module fails or does not return a [B, classes] tensor.
torch::Tensor run_script(const torch::jit::Module& module, const ImportOptions& import,
                         const torch::Tensor& pixels, const std::string& where);

// What run_script feeds the module: pixels normalised with import.mean/std, reshaped to [B, ...input_shape].
torch::Tensor script_input(const ImportOptions& import, const torch::Tensor& pixels);

struct OpCount {
  std::string op;  // e.g. "aten::conv2d", "quantized::linear_dynamic"
  std::int64_t count = 0;
};
struct OpCensus {
  std::vector<OpCount> int8_ops;    // quantized::* operators, and operators that read quantized tensors
  std::vector<OpCount> float_ops;   // every other top-level operator that ran (aten::*)
  std::vector<OpCount> border_ops;  // aten::quantize_per_tensor and aten::dequantize (static int8 borders)
  // Multiply-accumulates per sample of the float conv, linear and matmul operators that ran (an estimate:
  // fused kernels such as aten::_native_multi_head_attention are not counted).
  std::int64_t macs_per_sample = 0;
};
// Runs the module once on `pixels` (no autograd) and records the top-level operators it dispatched.
OpCensus census_ops(const torch::jit::Module& module, const ImportOptions& import,
                    const torch::Tensor& pixels, const std::string& where);
Json to_json(const std::vector<OpCount>& ops);  // [{"op": ..., "count": ...}]

struct DynamicScript {
  std::shared_ptr<torch::jit::Module> module;  // a copy; forward runs quantized::linear_dynamic
  std::int64_t quantized_layers = 0;           // nn.Linear submodules now in int8
  std::vector<std::string> float_layers;       // nn.Linear submodules left float, with the reason
  std::int64_t fp32_bytes = 0;                 // float parameters and buffers of the source module
  std::int64_t int8_bytes = 0;                 // the same after conversion (int8 weights + scales)
};
// Every nn.Linear submodule whose forward is F.linear(x, self.weight, self.bias) gets its weight quantized
// per tensor, symmetric (scale = max|w| / 127.5, PyTorch's default dynamic qconfig) and prepacked on
// `engine` (select_quantized_engine's names); forward then runs quantized::linear_dynamic(x, packed,
// reduce_range=True), quantizing activations at run time. The float weight is dropped where no other code
// of the module reads it. Throws ipj::Error(unsupported) when the module has no such layer.
DynamicScript quantize_script_dynamic(const torch::jit::Module& module, const std::string& engine,
                                      const std::string& where);

// Bytes of a module's parameters and buffers as they are (its float size before quantization).
std::int64_t script_module_bytes(const torch::jit::Module& module);
// Bytes of parameters, buffers and int8 weights that quantize_script_dynamic packed into the module.
std::int64_t script_model_bytes(const torch::jit::Module& module);

struct ScriptPruning {
  std::vector<torch::Tensor> weights;  // the pruned parameters (aliases into the module)
  std::vector<torch::Tensor> masks;    // 0/1, one per weight
  std::vector<std::string> names;      // their module paths
  std::int64_t zeroed = 0;             // weights set to zero by pruning
  std::int64_t total_params = 0;       // every parameter of the module
};
// Zeroes the `sparsity` fraction of smallest-magnitude entries of each weight parameter (named *weight, at
// least 2-D: linear, conv, attention projections, embeddings) in place.
ScriptPruning prune_script_magnitude(torch::jit::Module& module, double sparsity);
// Fraction of zero entries over the pruned weights.
double script_weight_sparsity(const ScriptPruning& pruning);

// SGD (momentum 0.9) fine-tuning of all parameters with cross-entropy on raw pixels (train mode), masks
// re-applied after each step; the module is back in eval mode afterwards.
void fine_tune_script(torch::jit::Module& module, const ImportOptions& import, const data::ImageSet& images,
                      int epochs, double learning_rate, std::int64_t batch_size, std::uint64_t seed,
                      bool show_progress, const ScriptPruning& pruning);

std::int64_t script_parameter_count(const torch::jit::Module& module);
// Writes the module atomically with `info` as its ipj.json extra file (what ipj bench/serve read back).
void save_script(const torch::jit::Module& module, const std::string& path, const Json& info);

}  // namespace ipj::quant
