// Private to the export module: the direct TorchScript -> ONNX exporter, used when ipj's graph IR refuses a
// model. It converts the frozen, inlined forward graph node by node; shapes and static integers come from two
// trial runs (batches 3 and 8), so the batch stays symbolic. Limits: no data-dependent control flow.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ipj/core/json_io.hpp"
#include "ipj/quant/torchscript_import.hpp"

namespace ipj::exporter {

struct ScriptOnnx {
  std::string bytes;                       // a serialized ModelProto that passed check_onnx_model
  std::vector<std::int64_t> output_shape;  // per sample, e.g. [classes]
  bool static_int8 = false;                // quantize_per_tensor / quantized::conv2d, linear, add (QDQ)
  bool dynamic_int8 = false;               // quantized::linear_dynamic layers (DynamicQuantizeLinear)
  Json operators = Json::object();         // aten operator -> count, as found in the graph
};

// Exports the TorchScript file `path` (input [N, ...import.input_shape], raw pixels; import.mean/std
// normalise 3-d inputs as ipj's inference does). Throws ipj::Error(unsupported) naming an aten operator and
// its module path when it has no ONNX form here, usage for a bad opset.
ScriptOnnx script_to_onnx(const std::string& path, const quant::ImportOptions& import, int opset);

}  // namespace ipj::exporter
