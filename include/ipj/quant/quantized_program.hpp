// A LayerProgram converted to int8 and run on LibTorch's quantized kernels (oneDNN here, QNNPACK/FBGEMM where
// built): dynamic (int8 Linear weights, activations quantized per batch; convolutions stay fp32) or static
// (calibrated activation scales, quantized Conv and Linear with fused ReLU, max-pool on int8). Saved as one
// file.
#pragma once

#include <torch/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ipj/core/json_io.hpp"
#include "ipj/quant/layer_program.hpp"
#include "ipj/quant/observer.hpp"

namespace ipj::quant {

// 2: the layout of 1, always sealed with a checksum (core/checked_file.hpp); format 1 files are still read.
inline constexpr int kInt8FormatVersion = 2;

enum class QuantMode { dynamic, static_ptq, qat };
std::string quant_mode_name(QuantMode mode);  // "dynamic" | "static" | "qat"
QuantMode parse_quant_mode(const std::string& name);

// Selects LibTorch's quantized engine ("onednn", "qnnpack", "fbgemm", or "auto": oneDNN, then FBGEMM, then
// QNNPACK). Throws ipj::Error(unsupported) naming the engines this build has. Returns the engine chosen.
std::string select_quantized_engine(const std::string& requested);
// Makes `engine` (a name select_quantized_engine returned) LibTorch's quantized engine again if another model
// changed it since: the engine is the process's, and it picks the kernels of the ops between the packed ones
// (adds, pools, clamps), so each int8 forward asks for its own. Cheap when it already is.
void use_quantized_engine(const std::string& engine);
std::vector<std::string> available_quantized_engines();
// An engine whose int8 kernels compute exactly on this CPU (no int16 saturation of u8 x s8 sums, so 8-bit
// weights run as stored): the default when it is exact here, else QNNPACK when this build has it, else "".
std::string exact_quantized_engine();

class QuantizedProgram {
 public:
  // static_ptq / qat need one QuantParams per layer index (used for weighted layers' outputs); dynamic
  // ignores them.
  static QuantizedProgram convert(const LayerProgram& program, QuantMode mode,
                                  const std::vector<QuantParams>& output_params, const std::string& engine);
  // pixels: [B, C, H, W] in [0, 1] -> logits [B, classes] float
  torch::Tensor forward(const torch::Tensor& pixels) const;

  // Writes the int8 file atomically; `extra` (accuracies, calibration settings) is stored with it.
  void save(const std::string& path, const Json& extra) const;
  // Throws ipj::Error(invalid_input) when `path` is not an ipj int8 file. `engine`: "auto" runs on the
  // engine stored in the file, else on this one (select_quantized_engine's names).
  static QuantizedProgram load(const std::string& path, const std::string& engine = "auto");
  // True when `path` is an archive with ipj's int8 marker (cheap check before load).
  static bool is_int8_file(const std::string& path);

  QuantMode mode() const { return mode_; }
  const std::string& engine() const { return engine_; }
  const LayerProgram& program() const { return program_; }
  const Json& extra() const { return extra_; }
  // int8 weights + float scales and biases (+ float weights that stay fp32 in dynamic mode).
  std::int64_t parameter_bytes() const;
  // Per layer (what the ONNX exporter writes): int8 weights, their scales, the output quint8 parameters.
  const std::vector<torch::Tensor>& weight_int8() const { return weight_int8_; }
  const std::vector<torch::Tensor>& weight_scale() const { return weight_scale_; }
  const std::vector<QuantParams>& output_params() const { return output_params_; }
  // Layer `index`'s weights as the engine's int8 kernels run them: int8 values [out, ...] and double scales
  // [out] (the stored ones, or their 7-bit form where the kernels saturate: quantized_kernels.hpp), for
  // another int8 runtime that must compute what forward() does.
  std::pair<torch::Tensor, torch::Tensor> kernel_weight(std::size_t index) const;

 private:
  struct Packed;  // prepacked kernels per layer (LibTorch custom classes)
  QuantMode mode_ = QuantMode::dynamic;
  std::string engine_;
  LayerProgram program_;                     // float weights are kept only for layers that stay fp32
  std::vector<torch::Tensor> weight_int8_;   // per layer: kChar [out, ...] or undefined
  std::vector<torch::Tensor> weight_scale_;  // per layer: double [out] or undefined
  std::vector<QuantParams> output_params_;
  std::shared_ptr<const Packed> packed_;
  Json extra_;
  void pack();
};

}  // namespace ipj::quant
