// Private to the quant module: `ipj quantize --mode dynamic` and `ipj prune` (magnitude) on a TorchScript
// file as it is, without the graph importer (script_model.hpp), so that no operator refuses the model. The
// reports carry the keys of the graph paths plus int8_ops/float_ops and removed_params_fraction.
#pragma once

#include <string>

#include "ipj/core/json_io.hpp"
#include "ipj/quant/prune.hpp"
#include "ipj/quant/quantize.hpp"

namespace ipj::quant {

// Dynamic int8 of the file's nn.Linear layers with the accuracy guard; writes a TorchScript file (ipj.json
// extra file: inputs and "quantization") when the guard passes.
QuantizeResult run_quantize_script(const QuantizeOptions& options);

// Static int8 of the module as it is (script_static.hpp) with the accuracy guard, calibrated on --data or the
// data the file records; writes a TorchScript file (ipj.json "quantization": mode static, engine) when the
// guard passes. `fallback_reason` (why the graph importer refused the model) opens the report's warnings.
QuantizeResult run_quantize_script_static(const QuantizeOptions& options, const std::string& fallback_reason);

// Magnitude pruning of the file's weights, fine-tuning, TorchScript out. `structured_refusal` (non-empty
// when --structured was asked for and the graph path refused the model) goes into the report's warnings.
Json run_prune_script(const PruneOptions& options, const std::string& structured_refusal);

}  // namespace ipj::quant
