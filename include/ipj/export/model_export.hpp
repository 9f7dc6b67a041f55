// `ipj export`: any model ipj reads (checkpoint or run folder, program/graph file from `ipj prune`, int8 file
// from `ipj quantize`, a user's TorchScript file) written as ONNX (float or QDQ int8, see onnx_export.hpp) or
// as frozen, inference-optimised TorchScript; both take raw pixels in [0, 1]. ONNX files can be checked on
// ONNX Runtime (onnxruntime-node) against ipj's own inference of the source model before they are written.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ipj/core/json_io.hpp"
#include "ipj/export/onnx_export.hpp"
#include "ipj/export/onnx_runtime.hpp"
#include "ipj/quant/graph.hpp"
#include "ipj/quant/source_model.hpp"
#include "ipj/quant/torchscript_import.hpp"

namespace ipj::exporter {

inline constexpr int kExportSchemaVersion = 1;

enum class ExportFormat { onnx, torchscript };
// "onnx" | "torchscript"; throws ipj::Error(usage) naming --format.
ExportFormat parse_export_format(const std::string& name);
std::string export_format_name(ExportFormat format);

// A model as the exporters see it: graph IR (float weights where they stay float) and its int8 side.
struct ExportableModel {
  quant::Graph graph;
  std::optional<Int8Weights> int8;
  quant::ModelFileFormat format = quant::ModelFileFormat::checkpoint;
  std::string variant;                                       // fp32 | int8-static | int8-qat | int8-dynamic
  std::function<double(const torch::Tensor&)> import_check;  // TorchScript sources (see SourceModel)
  // TorchScript sources the graph IR refuses: why (fallback_reason) and the ONNX file that the direct
  // TorchScript exporter (script_onnx.hpp) wrote instead.
  std::string fallback_reason;
  std::string direct_onnx;
};
// Throws ipj::Error as load_source_model does (io, invalid_input, unsupported operators).
ExportableModel load_exportable_model(const std::string& path, const quant::ImportOptions& import);

// The parity bound for outputs `reference` ([B, classes]) of `model`: 1e-4 of the largest |logit| for float
// models, 20 output quantization steps for static int8 (rounding flips add up with depth), 2% of the largest
// |logit| for dynamic int8 (activation scales chosen per batch; measured 0.85%). See model_export.cpp.
double parity_tolerance(const ExportableModel& model, const torch::Tensor& reference);

struct ExportOptions {
  std::string model_path;
  std::string out_path;
  quant::ImportOptions import;  // TorchScript sources: --input-shape, --mean/--std
  ExportFormat format = ExportFormat::onnx;
  int opset = kDefaultOpset;
  bool verify = false;  // ONNX: run ONNX Runtime before writing
  std::vector<std::int64_t> verify_batch_sizes{1, 7};
  std::uint64_t seed = 0;
};

// Exports and writes `out_path` atomically; returns the JSON report (schema_version, model, source_format,
// format, out, bytes, input/output names and shapes, onnx summary, self_check, verify). Throws ipj::Error:
// usage (flags), unsupported (operator without an export, int8 to TorchScript, checker failure), runtime
// (ONNX Runtime disagrees with ipj beyond the tolerance: nothing is written).
Json run_export(const ExportOptions& options);

// Random 8-bit pixels [batch, ...sample_shape] in [0, 1] (multiples of 1/255, like decoded images).
torch::Tensor random_pixels(const std::vector<std::int64_t>& sample_shape, std::int64_t batch,
                            std::uint64_t seed);

// ONNX Runtime's outputs on `onnx_path` vs ipj's inference of `model_path` (as stored) on random pixels at
// each batch size: [{"batch", "max_abs_diff", "max_rel_diff", "tolerance", "passed"}].
Json onnx_parity(const OnnxRuntimeNode& runtime, const std::string& onnx_path, const std::string& model_path,
                 const ExportableModel& model, const quant::ImportOptions& import,
                 const std::vector<std::int64_t>& batch_sizes, std::uint64_t seed);

}  // namespace ipj::exporter
