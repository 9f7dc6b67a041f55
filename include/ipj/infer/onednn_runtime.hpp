// ipj's graph IR as one chain of oneDNN primitives for one batch size: convolutions with their bias and
// activation fused, pools and adds on oneDNN's blocked layouts (no reorder between layers that share one),
// linear layers as inner products reading the blocked tensor a flatten would have made dense. The fp32
// variant's batch route times it against the chosen engine and XNNPACK (fp32_batched_xnnpack.cpp). Limits:
// one batch size; average pools whose ceil mode counts padding, adaptive pools that do not divide their input
// and dilated pools are refused; built only with Debian's libdnnl-dev (IPJ_WITH_ONEDNN).
#pragma once

#include <cstdint>
#include <memory>

#include "ipj/infer/inference_model.hpp"
#include "ipj/quant/graph.hpp"

namespace ipj::infer {

// Whether this build has oneDNN's API (compiled against libdnnl-dev).
bool onednn_runtime_available();

// `graph` for [batch, ...graph.input_shape] inputs (the graph's normalisation and input padding applied in
// ATen first), on `threads` OpenMP threads of the calling thread (oneDNN's kernels split their work for the
// count they were made with: the runtime sets it around each call). Throws ipj::Error(unsupported) naming the
// first node it cannot take, or why oneDNN is missing. forward() refuses other shapes
// (ipj::Error(invalid_input)); concurrent calls run one at a time.
std::shared_ptr<InferenceModel> onednn_runtime_model(const quant::Graph& graph, std::int64_t batch,
                                                     int threads);

}  // namespace ipj::infer
