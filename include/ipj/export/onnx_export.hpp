// Graph IR -> ONNX with Debian's libonnx: float graphs as Conv/Gemm/Add/Relu/Clip/MaxPool/AveragePool/
// GlobalAveragePool/Flatten with the weights as initializers, int8 graphs as QuantizeLinear/DequantizeLinear
// (QDQ) around the same operators. The model takes raw pixels "pixels" [N, ...input_shape] in [0, 1] (N
// dynamic; normalisation and the mean padding of a folded first convolution are part of the graph) and
// returns "logits" [N, classes]. Limits: opsets 13 (per-channel DequantizeLinear) to 17 (onnx 1.12's newest).
#pragma once

#include <torch/types.h>

#include <string>
#include <vector>

#include "ipj/core/json_io.hpp"
#include "ipj/quant/graph.hpp"
#include "ipj/quant/observer.hpp"
#include "ipj/quant/quantized_program.hpp"

namespace ipj::exporter {

inline constexpr int kDefaultOpset = 17;  // ONNX Runtime 1.30 and onnx 1.12 both accept it
inline constexpr int kMinimumOpset = 13;
inline constexpr int kMaximumOpset = 17;
inline constexpr const char* kInputName = "pixels";
inline constexpr const char* kOutputName = "logits";

// The int8 side of a quantized graph, per node of its Graph: int8 weights [out, ...] with per-output-channel
// scales [out] (undefined where the node stays float), and each node output's quint8 parameters (static and
// QAT). Dynamic mode quantizes the inputs of int8 linear layers per batch (DynamicQuantizeLinear).
struct Int8Weights {
  quant::QuantMode mode = quant::QuantMode::static_ptq;
  std::vector<torch::Tensor> weight_int8;  // kChar
  std::vector<torch::Tensor> weight_scale;
  std::vector<quant::QuantParams> params;
};

// Converts `graph` (with `int8` when it is quantized, else nullptr) to a serialized ONNX ModelProto that
// passed check_onnx_model. Throws ipj::Error(usage) for an opset outside [13, 17], ipj::Error(unsupported)
// naming the node when a node has no ONNX form (e.g. adaptive pooling to a size that does not divide the
// input).
std::string graph_to_onnx(const quant::Graph& graph, const Int8Weights* int8, int opset);

// libonnx's checker and strict shape inference (the output must come out as declared). Throws
// ipj::Error(unsupported) with the checker's message, naming `where`.
void check_onnx_model(const std::string& serialized, const std::string& where);

// {"opset", "nodes", "initializers", "operators": {"Conv": 20, ...}, "input", "output"} of a serialized
// model.
Json onnx_model_summary(const std::string& serialized);

}  // namespace ipj::exporter
