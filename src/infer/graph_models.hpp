// Private to the infer module: InferenceModels over graph IR (ipj's ResNets, graph files, imported
// TorchScript files): float (fp32, bf16 autocast), int8 made on the fly, and int8 graph files.
#pragma once

#include <memory>
#include <string>

#include "ipj/infer/inference_model.hpp"
#include "ipj/quant/graph.hpp"

namespace ipj::infer {

// fp32 | bf16 | int8-dynamic | int8-static (calibrated on options.calibration_samples images of
// options.calibration_data, else `data_dir`, else the default data set). Throws ipj::Error(unsupported) for
// other variants. Sets parameter_bytes; the caller fills the rest.
// data_options: how the model's data set is read (image folders: resize, channels), merged with
// options.calibration_data_options.
std::shared_ptr<InferenceModel> graph_variant(quant::Graph graph, Variant variant,
                                              const std::string& data_dir,
                                              const data::DataOptions& data_options,
                                              const LoadOptions& options);
// An int8 file runs only as the variant it stores (or Variant::file): ipj::Error(unsupported) otherwise.
void require_stored_variant(Variant requested, Variant stored, const std::string& path);

// An `ipj quantize` int8 graph file, runnable as its stored variant (or "file").
std::shared_ptr<InferenceModel> int8_graph_model(const std::string& path, const LoadOptions& options);

}  // namespace ipj::infer
