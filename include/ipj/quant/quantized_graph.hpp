// Graph IR converted to int8 on LibTorch's quantized kernels: static (calibrated quint8 activations, int8
// conv/linear with fused ReLU/ReLU6, quantized residual adds, pooling on int8, one dequantize at the end) or
// dynamic (int8 linear weights, activations quantized per batch; convolutions stay fp32). Weights are kept
// in 8 bits and packed in 7 where the CPU's int8 kernels would saturate (quantized_kernels.hpp). Saved as
// one file.
#pragma once

#include <torch/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ipj/core/json_io.hpp"
#include "ipj/data/dataset.hpp"
#include "ipj/quant/graph.hpp"
#include "ipj/quant/observer.hpp"
#include "ipj/quant/quantized_program.hpp"

namespace ipj::quant {

// 2: the layout of 1, always sealed with a checksum (core/checked_file.hpp); format 1 files are still read.
inline constexpr int kInt8GraphFormatVersion = 2;

// Nodes whose output gets its own quint8 parameters in static int8: conv2d, linear, add, and the input when
// it is normalised explicitly (raw pixels in [0, 1] are exact with scale 1/255, zero point 0). Pools,
// flatten and clamp nodes keep their input's parameters.
std::vector<bool> quantization_points(const Graph& graph);

// Observes `samples` images of `images` through the float graph; one QuantParams per node (quantization
// points observed, the rest propagated).
std::vector<QuantParams> calibrate_graph(const Graph& graph, const data::ImageSet& images,
                                         std::int64_t samples, std::int64_t batch_size, ObserverKind observer,
                                         double percentile);
// QAT on the float graph: fake-quant weights (per channel) and activations at the quantization points (EMA
// min-max from calibrated ranges), SGD with momentum 0.9. Updates `graph`; returns the activation params.
std::vector<QuantParams> quantization_aware_training_graph(Graph& graph, const data::ImageSet& images,
                                                           int epochs, double learning_rate,
                                                           std::int64_t batch_size, std::uint64_t seed,
                                                           bool show_progress);

// Static int8 runs this node in float: the graph's last node when it is a linear layer (the logits, computed
// from the dequantized input and the dequantized int8 weights; 8-bit logits flipped close calls). Exporters
// must do the same.
bool keeps_float_logits(const Graph& graph, std::size_t index);

class QuantizedGraph {
 public:
  // static_ptq / qat need one QuantParams per node (calibrate_graph); dynamic ignores them.
  static QuantizedGraph convert(const Graph& graph, QuantMode mode, const std::vector<QuantParams>& params,
                                const std::string& engine);
  // input: as run_graph's -> output [B, classes] float. Thread-safe.
  torch::Tensor forward(const torch::Tensor& input) const;

  void save(const std::string& path, const Json& extra) const;
  // Throws ipj::Error(invalid_input) when `path` is not an ipj int8 graph file or is damaged. `engine`:
  // "auto" runs on the engine stored in the file, else on this one (select_quantized_engine's names).
  static QuantizedGraph load(const std::string& path, const std::string& engine = "auto");
  static bool is_int8_graph_file(const std::string& path);

  QuantMode mode() const { return mode_; }
  const std::string& engine() const { return engine_; }
  const Graph& graph() const { return graph_; }  // float weights only where they stay float
  const Json& extra() const { return extra_; }
  std::int64_t parameter_bytes() const;  // int8 weights + float scales, biases and float weights
  // Per node (what the ONNX exporter writes): int8 weights, their scales, the output quint8 parameters.
  const std::vector<torch::Tensor>& weight_int8() const { return weight_int8_; }
  const std::vector<torch::Tensor>& weight_scale() const { return weight_scale_; }
  const std::vector<QuantParams>& params() const { return params_; }
  // Node `index`'s weights as the engine's int8 kernels run them: int8 values [out, ...] and double scales
  // [out] (the stored ones, or their 7-bit form where the kernels saturate), for another int8 runtime.
  std::pair<torch::Tensor, torch::Tensor> kernel_weight(std::size_t index) const;
  // The float graph with the stored int8 weights dequantized: what any int8 runtime of it computes but for
  // the rounding of activations (the reference another runtime is measured against).
  Graph dequantized_graph() const;

  struct Packed;  // the prepacked kernels (opaque: defined in quantized_graph.cpp)

 private:
  QuantMode mode_ = QuantMode::dynamic;
  std::string engine_;
  Graph graph_;
  std::vector<torch::Tensor> weight_int8_;   // per node: kChar [out, ...] or undefined
  std::vector<torch::Tensor> weight_scale_;  // per node: double [out] or undefined
  std::vector<QuantParams> params_;          // per node output (static)
  std::shared_ptr<const Packed> packed_;
  Json extra_;
  void pack();
  torch::Tensor forward_static(const torch::Tensor& input) const;
  torch::Tensor forward_dynamic(const torch::Tensor& input) const;
};

}  // namespace ipj::quant
