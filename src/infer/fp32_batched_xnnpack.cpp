// The fp32 variant's larger batches on XNNPACK's runtime of the graph IR (a pthreadpool of the run's threads)
// where that is exact and timed faster at load than the engine chosen (MobileNetV2's depthwise convolutions:
// XNNPACK's kernels beat oneDNN's). Limits: one batch size (the one timed); other sizes run the chosen
// engine.
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "graph_models.hpp"
#include "ipj/core/error.hpp"
#include "ipj/core/log.hpp"
#include "ipj/core/number_format.hpp"
#include "ipj/device/machine_load.hpp"
#include "ipj/device/threading.hpp"
#include "ipj/infer/fp32_engine.hpp"
#include "ipj/infer/xnnpack_runtime.hpp"

namespace ipj::infer {
namespace {

// Past this the batch's arithmetic takes the load time too (timing both sides costs >= 12 such calls).
constexpr double kMaxTimedBatchMs = 250.0;

// xnnpack_batch_route's model (xnnpack_runtime.hpp).
class SizedBatchRoute : public InferenceModel {
 public:
  SizedBatchRoute(BatchRouteModels models, std::vector<std::int64_t> batch_shape, int threads,
                  std::int64_t min_rows)
      : models_(std::move(models)),
        batch_shape_(std::move(batch_shape)),
        threads_(threads),
        min_rows_(min_rows) {
    InferenceModel::operator=(*models_.chosen);
  }
  torch::Tensor forward(const torch::Tensor& input) const override {
    if (!fits(input)) return models_.chosen->forward(input);
    if (!(input.abs().max().item<float>() <= kLargestXnnpackInput))  // NaN fails too
      return models_.fallback->forward(input);
    const std::int64_t rows = input.size(0);
    if (rows == batch_shape_[0]) return models_.xnnpack->forward(input);
    std::vector<std::int64_t> padding_shape = batch_shape_;
    padding_shape[0] -= rows;
    const torch::Tensor padded = torch::cat({input, torch::zeros(padding_shape, input.options())});
    return models_.xnnpack->forward(padded).narrow(0, 0, rows);  // [rows, ...]
  }

 private:
  // [min_rows, batch] rows of the sample shape, and the run's plan gives the runtime's threads: ATen's pool
  // for convolutional models, OpenBLAS's for GEMM-bound ones (ATen at 1)
  bool fits(const torch::Tensor& input) const {
    if (input.dim() != static_cast<std::int64_t>(batch_shape_.size()) || input.size(0) < min_rows_ ||
        input.size(0) > batch_shape_[0] || input.scalar_type() != torch::kFloat ||
        !input.sizes().slice(1).equals(c10::IntArrayRef(batch_shape_).slice(1)))
      return false;
    return std::max(device::caller_openmp_threads(), device::blas_thread_count()) >= threads_;
  }

  BatchRouteModels models_;
  std::vector<std::int64_t> batch_shape_;  // [batch, ...sample_shape]
  int threads_ = 1;
  std::int64_t min_rows_ = 0;
};

Forward forward_on(const std::shared_ptr<InferenceModel>& model, int threads) {
  return [model, threads](const torch::Tensor& input) {
    const device::CallerOpenMpThreads scope(threads);
    return model->forward(input);
  };
}

// The chosen engine's batch time as the engine choice measured it (0: not measured).
double chosen_batch_ms(const Fp32EngineChoice& choice) {
  for (const EngineMeasurement& measured : choice.measured)
    if (measured.engine == choice.engine) return measured.batch_ms;
  return 0.0;
}

// XNNPACK's runtime for [batch, ...sample_shape] on a pool of `threads` (on `busy` while another call holds
// it), checked against eager on pixels and normal(0, 2) values; null when it cannot be built or differs
// (the reason says which).
std::shared_ptr<InferenceModel> checked_runtime(const std::shared_ptr<InferenceModel>& eager,
                                                const std::shared_ptr<InferenceModel>& busy,
                                                const GraphIrSource& graph_ir,
                                                const std::vector<std::int64_t>& sample_shape,
                                                std::int64_t batch, int threads, std::string& reason) {
  std::shared_ptr<InferenceModel> runtime;
  double difference = INFINITY;
  try {
    runtime = xnnpack_runtime_model(graph_ir(), batch, threads, busy);
    const Forward reference = [&eager](const torch::Tensor& input) { return eager->forward(input); };
    const Forward candidate = [&runtime](const torch::Tensor& input) { return runtime->forward(input); };
    difference = std::max(fp32_difference(reference, candidate, sample_shape, batch),
                          fp32_wide_difference(reference, candidate, sample_shape, batch));
  } catch (const std::exception& error) {  // a node XNNPACK cannot take, or it fails on this model
    reason = error_cause(error.what());
    return nullptr;
  }
  if (difference <= kFp32EngineTolerance) return runtime;
  reason = "differs from eager by " + format_number("%.2g", difference) + " (relative)";
  return nullptr;
}

}  // namespace

std::shared_ptr<InferenceModel> xnnpack_batch_route(BatchRouteModels models,
                                                    std::vector<std::int64_t> batch_shape, int threads,
                                                    std::int64_t min_rows) {
  return std::make_shared<SizedBatchRoute>(std::move(models), std::move(batch_shape), threads, min_rows);
}

std::shared_ptr<InferenceModel> with_batched_xnnpack(const std::shared_ptr<InferenceModel>& eager,
                                                     std::shared_ptr<InferenceModel> chosen,
                                                     const GraphIrSource& graph_ir,
                                                     const std::vector<std::int64_t>& sample_shape,
                                                     const RunOptions& run, Fp32EngineChoice& choice) {
  choice.batch_engine = choice.engine;
  const std::int64_t batch = choice.batch;
  const bool forced = choice.requested == Fp32Engine::xnnpack;
  if (forced && choice.engine != Fp32Engine::xnnpack) return chosen;  // its graph differed: eager runs
  if (!graph_ir || sample_shape.empty() || batch <= 1 || !xnnpack_runtime_available()) return chosen;
  if (!forced && chosen_batch_ms(choice) > kMaxTimedBatchMs) {
    choice.reason += "; xnnpack not tried at batch " + std::to_string(batch) + " (" +
                     format_number("%.0f", chosen_batch_ms(choice)) + " ms per batch)";
    return chosen;
  }
  // the pool as the run sets it later (--threads, else every CPU the process may use)
  const int threads =
      std::max(1, run.pool_threads > 0 ? run.pool_threads : device::read_cpu_limits().available_cpus);
  const std::string at_batch = "XNNPACK runtime at batch " + std::to_string(batch);
  std::string refused;
  const auto runtime = checked_runtime(eager, chosen, graph_ir, sample_shape, batch, threads, refused);
  if (!runtime) {
    choice.reason += "; " + at_batch + " not used: " + refused;
    return chosen;
  }
  choice.batch_xnnpack_threads = threads;
  std::vector<std::int64_t> shape{batch};
  shape.insert(shape.end(), sample_shape.begin(), sample_shape.end());
  const std::string on_threads = ", " + std::to_string(threads) + " thread(s)";
  if (forced) {  // larger batches on XNNPACK's operators, batch `batch` on its runtime
    choice.batch_engine = Fp32Engine::xnnpack;
    choice.batch_xnnpack_min_rows = batch;
    choice.reason += "; batch " + std::to_string(batch) + " on XNNPACK runtime (checked" + on_threads + ")";
    return xnnpack_batch_route(BatchRouteModels{chosen, runtime, eager}, shape, threads, batch);
  }
  torch::NoGradGuard no_grad;
  const std::vector<double> fastest =
      fastest_alternating_ms({forward_on(chosen, threads), forward_on(runtime, threads)}, torch::rand(shape));
  choice.batch_xnnpack_ms = fastest[1];
  // the same threads on both sides: XNNPACK has to be >= 10% faster (no flip-flopping between loads)
  const bool wins = fastest[1] <= 0.9 * fastest[0];
  choice.reason += "; " + at_batch + (wins ? " runs it: " : " kept out: ") +
                   format_number("%.3f", fastest[1]) + " ms vs " + format_number("%.3f", fastest[0]) +
                   " ms (" + choice_name(choice.engine) + ")" + on_threads;
  if (!wins) return chosen;
  choice.batch_engine = Fp32Engine::xnnpack;
  // Smaller batches (a server's partial ones) padded with zero rows up to `batch` where that still wins by
  // the same margin, the chosen engine's time taken as proportional to the rows (an underestimate where it
  // has a fixed cost per call). Never batch 1: its own route (one thread or XNNPACK on the calling thread)
  // decides.
  const double rows_to_win = std::ceil(static_cast<double>(batch) * fastest[1] / (0.9 * fastest[0]));
  choice.batch_xnnpack_min_rows = std::clamp<std::int64_t>(static_cast<std::int64_t>(rows_to_win), 2, batch);
  if (choice.batch_xnnpack_min_rows < batch)
    choice.reason += "; batches of " + std::to_string(choice.batch_xnnpack_min_rows) + "-" +
                     std::to_string(batch - 1) + " padded to it";
  return xnnpack_batch_route(BatchRouteModels{chosen, runtime, chosen}, shape, threads,
                             choice.batch_xnnpack_min_rows);
}

}  // namespace ipj::infer
