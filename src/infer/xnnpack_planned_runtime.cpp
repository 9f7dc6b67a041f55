// One XNNPACK runtime with its buffers behind the InferenceModel interface (xnnpack_planned_runtime.hpp).
// Limits: one input shape; the caller's subgraph is trusted to read external value 0 and write value 1.
#ifdef IPJ_WITH_XNNPACK

#include "xnnpack_planned_runtime.hpp"

#include <algorithm>
#include <atomic>
#include <utility>

#include "ipj/core/error.hpp"

namespace ipj::infer::xnnpack {
namespace {

std::atomic<std::uint64_t> answered_calls{0};  // calls_answered()

std::int64_t buffer_elements(const Shape& shape) {
  std::int64_t count = 1;
  for (const std::int64_t size : shape)
    count *= size;
  return count + static_cast<std::int64_t>(XNN_EXTRA_BYTES / sizeof(float));
}

// Up to this many input elements (a batch of a few small images, one 3x224x224) one loop on the calling
// thread writes the runtime's input, where ATen's operators (a dozen calls) cost more than the arithmetic;
// larger inputs keep ATen's vectorised operators on the run's threads.
constexpr std::int64_t kMostElementsWrittenByLoop = 1 << 18;

// The buffer as an ATen tensor of `shape` whose memory is NHWC (channels-last strides) for 4-D shapes.
torch::Tensor nhwc_view(const torch::Tensor& buffer, const Shape& shape) {
  if (shape.size() != 4) return buffer.narrow(0, 0, shape[0] * shape[1]).view(shape);
  const Shape strides{shape[1] * shape[2] * shape[3], 1, shape[3] * shape[1], shape[1]};
  return buffer.as_strided(shape, strides);
}

}  // namespace

bool initialised() {
  static const bool ok = xnn_initialize(nullptr) == xnn_status_success;
  return ok;
}

std::vector<std::size_t> xnn_dims(const Shape& aten_shape) {
  std::vector<std::size_t> dims(aten_shape.begin(), aten_shape.end());
  if (aten_shape.size() == 4) dims = {dims[0], dims[2], dims[3], dims[1]};
  return dims;
}

std::string status_text(xnn_status status) {
  const char* meaning = "";
  switch (status) {
    case xnn_status_success:
      meaning = "success";
      break;
    case xnn_status_uninitialized:
      meaning = "XNNPACK not initialised";
      break;
    case xnn_status_invalid_parameter:
      meaning = "an invalid parameter";
      break;
    case xnn_status_invalid_state:
      meaning = "an invalid state";
      break;
    case xnn_status_unsupported_parameter:
      meaning = "an unsupported parameter (e.g. a scale ratio out of its range)";
      break;
    case xnn_status_unsupported_hardware:
      meaning = "unsupported on this CPU";
      break;
    case xnn_status_out_of_memory:
      meaning = "out of memory";
      break;
  }
  return "status " + std::to_string(static_cast<int>(status)) + ": " + meaning;
}

std::string shape_text(const Shape& shape) {
  std::string text;
  for (const std::int64_t size : shape)
    text += (text.empty() ? "" : ", ") + std::to_string(size);
  return "[" + text + "]";
}

AxisTaps axis_taps(std::int64_t in, std::int64_t out, std::int64_t kernel, std::int64_t stride,
                   std::int64_t padding, std::int64_t dilation) {
  std::int64_t first = kernel, last = -1;
  for (std::int64_t tap = 0; tap < kernel; ++tap)
    for (std::int64_t position = 0; position < out; ++position) {
      const std::int64_t row = position * stride - padding + tap * dilation;
      if (row >= 0 && row < in) {
        first = std::min(first, tap);
        last = std::max(last, tap);
      }
    }
  AxisTaps taps{0, kernel, padding, padding};
  if (last < 0 || (first == 0 && last == kernel - 1)) return taps;  // all taps used (or none: leave it)
  const std::int64_t count = last - first + 1, before = padding - first * dilation;
  const std::int64_t after = (out - 1) * stride + dilation * (count - 1) + 1 - in - before;
  if (before < 0 || after < 0 || (in + before + after - dilation * (count - 1) - 1) / stride + 1 != out)
    return taps;  // not expressible with XNNPACK's non-negative padding: keep the whole kernel
  return {first, count, before, after};
}

std::vector<Shape> node_shapes(const quant::Graph& graph, std::int64_t batch) {
  torch::NoGradGuard no_grad;
  Shape input_shape{batch};
  input_shape.insert(input_shape.end(), graph.input_shape.begin(), graph.input_shape.end());
  const torch::Tensor input = torch::zeros(input_shape);
  std::vector<Shape> shapes(graph.nodes.size());
  quant::GraphHooks hooks;
  hooks.output = [&shapes](std::size_t index, torch::Tensor value) {
    shapes.at(index) = value.sizes().vec();
    return value;
  };
  quant::run_graph(graph, input, hooks);
  shapes[0] = quant::prepare_graph_input(graph, input).sizes().vec();
  return shapes;
}

std::vector<bool> live_nodes(const quant::Graph& graph) {
  std::vector<bool> live(graph.nodes.size(), false);
  live.back() = true;
  for (std::size_t index = graph.nodes.size(); index-- > 0;)
    if (live[index])
      for (const std::size_t input : graph.nodes[index].inputs)
        live[input] = true;
  return live;
}

std::uint32_t ceil_padding(std::int64_t in, std::int64_t out, std::int64_t kernel, std::int64_t stride,
                           std::int64_t padding, std::int64_t dilation) {
  const std::int64_t needed = (out - 1) * stride + dilation * (kernel - 1) + 1 - (in + 2 * padding);
  return static_cast<std::uint32_t>(std::max<std::int64_t>(needed, 0));
}

PlannedRuntimeModel::PlannedRuntimeModel(xnn_subgraph_t subgraph, Shape input_shape, Shape output_shape,
                                         std::vector<std::int64_t> sample, PrepareInput prepare, int threads,
                                         std::shared_ptr<const InferenceModel> busy, XnnpackIdle idle,
                                         WriteInput write)
    : prepare_(std::move(prepare)),
      write_(std::move(write)),
      busy_(std::move(busy)),
      idle_(idle),
      input_shape_(std::move(input_shape)),
      output_shape_(std::move(output_shape)) {
  sample_shape = std::move(sample);
  if (threads >= 2) pool_ = pthreadpool_create(static_cast<std::size_t>(threads));
  const xnn_status created = xnn_create_runtime_v2(subgraph, pool_, 0, &runtime_);
  xnn_delete_subgraph(subgraph);
  if (created != xnn_status_success) {
    release();
    fail(ErrorCategory::unsupported,
         "XNNPACK runtime: the plan could not be made (" + status_text(created) + ")");
  }
  input_buffer_ = torch::empty({buffer_elements(input_shape_)});
  output_buffer_ = torch::empty({buffer_elements(output_shape_)});
  const xnn_external_value external[2] = {{0, input_buffer_.data_ptr<float>()},
                                          {1, output_buffer_.data_ptr<float>()}};
  if (xnn_setup_runtime(runtime_, 2, external) != xnn_status_success) {
    release();
    fail(ErrorCategory::unsupported, "XNNPACK runtime: its buffers could not be set up");
  }
}

std::uint64_t calls_answered() {
  return answered_calls.load(std::memory_order_relaxed);
}

void count_answered_call() {
  answered_calls.fetch_add(1, std::memory_order_relaxed);
}

PlannedRuntimeModel::~PlannedRuntimeModel() {
  release();
}

torch::Tensor PlannedRuntimeModel::forward(const torch::Tensor& input) const {
  if (input.dim() != static_cast<std::int64_t>(sample_shape.size()) + 1 || input.size(0) != input_shape_[0] ||
      !input.sizes().slice(1).equals(sample_shape))
    fail(ErrorCategory::invalid_input, "XNNPACK runtime: input of shape " + shape_text(input.sizes().vec()) +
                                           " where it was built for batch " +
                                           std::to_string(input_shape_[0]) + " of " +
                                           shape_text(sample_shape));
  std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock()) {
    if (busy_) return busy_->forward(input);
    lock.lock();
  }
  torch::NoGradGuard no_grad;
  if (!write_ || input.numel() > kMostElementsWrittenByLoop ||
      !write_(input, input_buffer_.data_ptr<float>()))
    nhwc_view(input_buffer_, input_shape_).copy_(prepare_(input));
  const xnn_status status = xnn_invoke_runtime(runtime_);
  if (pool_ && idle_ == XnnpackIdle::sleep) put_workers_to_sleep();
  if (status != xnn_status_success) fail(ErrorCategory::runtime, "XNNPACK runtime: the call failed");
  if (runtime_calls_counted_on_this_thread()) count_answered_call();
  return nhwc_view(output_buffer_, output_shape_)
      .clone(torch::MemoryFormat::Contiguous);  // [N, C, H, W] / [N, F]
}

// XNN_FLAG_YIELD_WORKERS does not reach this XNNPACK's last operator (measured: the worker still spun 5 ms
// after every call, bench/xnnpack_threads.sh), so an empty task with pthreadpool's yield flag follows each
// call: the workers take it and then sleep instead of spinning through a million pauses.
void PlannedRuntimeModel::put_workers_to_sleep() const {
  pthreadpool_parallelize_1d(
      pool_, [](void*, std::size_t) {}, nullptr, pthreadpool_get_threads_count(pool_),
      PTHREADPOOL_FLAG_YIELD_WORKERS);
}

void PlannedRuntimeModel::release() {
  if (runtime_) xnn_delete_runtime(runtime_);
  if (pool_) pthreadpool_destroy(pool_);
  runtime_ = nullptr;
  pool_ = nullptr;
}

}  // namespace ipj::infer::xnnpack

#endif
