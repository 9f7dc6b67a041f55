// ipj's graph IR as one chain of oneDNN primitives for one batch size: convolutions with their bias and
// activation fused, pools and adds on oneDNN's blocked layouts (no reorder between layers that share one),
// linear layers as inner products reading the blocked tensor a flatten would have made dense. The fp32
// variant's batch route times it against the chosen engine and XNNPACK (fp32_batched_xnnpack.cpp). Limits:
// one batch size; average pools whose ceil mode counts padding, adaptive pools that do not divide their input
// and dilated pools are refused; built only with Debian's libdnnl-dev (IPJ_WITH_ONEDNN).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ipj/infer/inference_model.hpp"
#include "ipj/quant/graph.hpp"

namespace ipj::infer {

// Whether this build has oneDNN's API (compiled against libdnnl-dev).
bool onednn_runtime_available();

// How many forward calls oneDNN runtimes (any model) have answered in this process so far, as
// xnnpack_runtime_calls() counts XNNPACK's: calls passed to `busy` and calls on a thread while an
// UncountedRuntimeCalls lives there are not counted; always 0 in a build without oneDNN.
std::uint64_t onednn_runtime_calls();

// How each 3x3 stride-1 convolution gets its kernel: the faster of oneDNN's direct and Winograd kernels,
// timed at load (the default); direct only; or Winograd wherever oneDNN has one (AVX-512 only), untimed.
enum class OnednnConvolutionKernel { timed, direct, winograd };

// `graph` for [batch, ...graph.input_shape] inputs (the graph's normalisation and input padding applied in
// ATen first), on `threads` OpenMP threads of the calling thread (oneDNN's kernels split their work for the
// count they were made with: the runtime sets it around each call). Throws ipj::Error(unsupported) naming the
// first node it cannot take, or why oneDNN is missing. forward() refuses other shapes
// (ipj::Error(invalid_input)); concurrent calls run one at a time, or on `busy` (when given) while another
// call holds the runtime.
std::shared_ptr<InferenceModel> onednn_runtime_model(
    const quant::Graph& graph, std::int64_t batch, int threads,
    OnednnConvolutionKernel convolutions = OnednnConvolutionKernel::timed,
    std::shared_ptr<const InferenceModel> busy = nullptr);

// The kernel oneDNN runs for each convolution and linear layer of a model from onednn_runtime_model: the
// node's name and oneDNN's implementation (e.g. "jit_wino_4x3:avx512_core", "brgconv:avx512_core"), in
// graph order; empty for any other model.
struct OnednnNodeKernel {
  std::string node;
  std::string kernel;
  bool convolution = false;  // else a linear layer
};
std::vector<OnednnNodeKernel> onednn_runtime_kernels(const InferenceModel& model);

// " (Winograd for 5 of its 20 convolutions)" for such a model that runs any on Winograd's kernel, else "".
std::string onednn_winograd_note(const InferenceModel& model);

}  // namespace ipj::infer
