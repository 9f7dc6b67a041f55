// Private to infer: one XNNPACK runtime made from a subgraph whose external value 0 is the fp32 input and 1
// the fp32 output, with the buffers it was set up on, behind the InferenceModel interface (fp32 and int8
// runtimes share it). Limits: one input shape per runtime; built only with IPJ_WITH_XNNPACK.
#pragma once

#ifdef IPJ_WITH_XNNPACK

#include <pthreadpool.h>
#include <torch/types.h>
#include <xnnpack.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ipj/infer/inference_model.hpp"
#include "ipj/infer/xnnpack_runtime.hpp"
#include "ipj/quant/graph.hpp"

namespace ipj::infer::xnnpack {

using Shape = std::vector<std::int64_t>;

// XNNPACK initialised on this CPU (once per process).
bool initialised();

// Calls PlannedRuntimeModel::forward has answered in this process (xnnpack_runtime_calls()).
std::uint64_t calls_answered();
// One more call answered (a runtime made of others that do not count their own: a row split).
void count_answered_call();

// XNNPACK's dims of an ATen shape: [N, C, H, W] -> [N, H, W, C]; [N, F] as is.
std::vector<std::size_t> xnn_dims(const Shape& aten_shape);

std::string shape_text(const Shape& shape);  // "[1, 28, 28]"
std::string status_text(xnn_status status);  // "status 4: an unsupported parameter"

// One spatial axis of a convolution: the kernel taps that ever touch the input (not only its zero padding)
// and the padding that keeps the output size once the others are cut. At the tail of a CNN run on small
// images (ResNet-18's last stage at 1x1 on 28x28 inputs) a 3x3 kernel reads one real pixel: its other taps
// multiply zeros (in int8 the zero point, real 0 too), yet their weights are read on every call.
struct AxisTaps {
  std::int64_t first = 0, count = 0;  // the taps kept: [first, first + count)
  std::int64_t pad_before = 0, pad_after = 0;
};
AxisTaps axis_taps(std::int64_t in, std::int64_t out, std::int64_t kernel, std::int64_t stride,
                   std::int64_t padding, std::int64_t dilation);

// Every node's ATen output shape on a [batch, ...input_shape] input (node 0: the prepared input); the graph
// is run in float on zeros, so conv/linear nodes need weights of their shapes (any values).
std::vector<Shape> node_shapes(const quant::Graph& graph, std::int64_t batch);

// The nodes the output depends on: XNNPACK allocates no memory for a value nobody reads, and its checks
// (assertions in Debian's build) stop the process at such a node, so dead nodes are left out.
std::vector<bool> live_nodes(const quant::Graph& graph);

// Extra bottom/right padding that makes XNNPACK's floor rule give ATen's ceil_mode size `out`.
std::uint32_t ceil_padding(std::int64_t in, std::int64_t out, std::int64_t kernel, std::int64_t stride,
                           std::int64_t padding, std::int64_t dilation);

// What the model turns a caller's [N, ...sample_shape] input into before the runtime reads it: the ATen
// value of the runtime's input shape (normalisation, padding).
using PrepareInput = std::function<torch::Tensor(const torch::Tensor&)>;
// The same values written straight into the runtime's NHWC input buffer, or false (nothing written) where
// the input is not one it takes (PrepareInput runs then): quant::write_graph_input_nhwc.
using WriteInput = std::function<bool(const torch::Tensor& input, float* buffer)>;

// The runtime with its buffers: inputs are copied into an NHWC buffer with XNN_EXTRA_BYTES to spare (XNNPACK
// may read that far past a tensor), outputs copied out of its own buffer. Concurrent calls run one at a time,
// or on `busy` (when given) while another call holds the runtime.
class PlannedRuntimeModel : public InferenceModel {
 public:
  // Deletes `subgraph` whatever happens. input_shape / output_shape: the ATen shapes of external values 0
  // and 1 ([N, C, H, W] held as NHWC, or [N, F]). Throws ipj::Error(unsupported) when XNNPACK makes no plan.
  PlannedRuntimeModel(xnn_subgraph_t subgraph, Shape input_shape, Shape output_shape,
                      std::vector<std::int64_t> sample_shape, PrepareInput prepare, int threads,
                      std::shared_ptr<const InferenceModel> busy, XnnpackIdle idle, WriteInput write = {});
  ~PlannedRuntimeModel() override;
  PlannedRuntimeModel(const PlannedRuntimeModel&) = delete;
  PlannedRuntimeModel& operator=(const PlannedRuntimeModel&) = delete;

  // input: [batch, ...sample_shape] exactly (ipj::Error(invalid_input) otherwise) -> the output.
  torch::Tensor forward(const torch::Tensor& input) const override;

 private:
  void put_workers_to_sleep() const;
  void release();

  PrepareInput prepare_;
  WriteInput write_;
  std::shared_ptr<const InferenceModel> busy_;
  XnnpackIdle idle_ = XnnpackIdle::sleep;
  Shape input_shape_, output_shape_;
  pthreadpool_t pool_ = nullptr;
  xnn_runtime_t runtime_ = nullptr;
  torch::Tensor input_buffer_, output_buffer_;
  mutable std::mutex mutex_;
};

}  // namespace ipj::infer::xnnpack

#endif
