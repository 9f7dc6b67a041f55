// Static and QAT int8 variants' batches of one size on XNNPACK's int8 runtime on a pthreadpool of the run's
// threads, where it passes the batch-1 check and times faster at load than LibTorch's int8 kernels, then
// raced call by call (xnnpack_batch_route; a re-planned server's shrunk plan gets a runtime of its own).
// Limits: one batch size; smaller batches padded to it where that still wins, other sizes on LibTorch's
// kernels; dynamic int8 has no candidate (its scales change per batch).
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "graph_models.hpp"
#include "ipj/core/error.hpp"
#include "ipj/core/log.hpp"
#include "ipj/core/number_format.hpp"
#include "ipj/infer/xnnpack_runtime.hpp"

namespace ipj::infer {
namespace {

// `model` as it runs, with what the load measured about its batches.
class RecordedBatchEngine : public InferenceModel {
 public:
  RecordedBatchEngine(InferenceModelPtr model, Int8BatchEngine engine) : model_(std::move(model)) {
    InferenceModel::operator=(*model_);
    int8_batch_engine = std::move(engine);
  }
  torch::Tensor forward(const torch::Tensor& input) const override { return model_->forward(input); }

 private:
  InferenceModelPtr model_;
};

// The runtime's answer to a [1, ...sample] input put in the last row of a full batch (fixed pixel rows
// before it): the candidate's batch-1 check, run on the batched runtime.
Forward last_row_of_batch(const std::shared_ptr<const InferenceModel>& runtime,
                          const std::vector<std::int64_t>& batch_shape) {
  std::vector<std::int64_t> others_shape = batch_shape;
  others_shape[0] -= 1;
  const torch::Tensor others = torch::rand(others_shape);  // [batch - 1, ...sample] in [0, 1)
  return [runtime, others](const torch::Tensor& input) {
    return runtime->forward(torch::cat({others, input})).narrow(0, others.size(0), 1);  // [1, classes]
  };
}

// The candidate's runtime for `shape` on `threads`, or null with `reason` where it cannot be built or
// disagrees with LibTorch's int8 kernels on the batch-1 check (run on the runtime's last row).
std::shared_ptr<const InferenceModel> checked_int8_runtime(const InferenceModelPtr& int8,
                                                           const Batch1Candidate& candidate,
                                                           const std::vector<std::int64_t>& shape,
                                                           int threads, std::string& reason) {
  std::shared_ptr<InferenceModel> runtime;
  try {
    runtime = candidate.build(int8, shape[0], threads);
  } catch (const std::exception& error) {
    reason = error_cause(error.what());
    return nullptr;
  }
  torch::NoGradGuard no_grad;
  reason = candidate.disagreement(forward_on(int8, threads), last_row_of_batch(runtime, shape));
  return reason.empty() ? runtime : nullptr;
}

}  // namespace

InferenceModelPtr with_batched_int8_xnnpack(InferenceModelPtr routed, const InferenceModelPtr& int8,
                                            const Batch1Candidate& candidate, const RunOptions& run) {
  const std::int64_t batch = run.fp32_engine_batch;
  if (!candidate.build || int8->sample_shape.empty() || batch <= 1 || !run.batched_xnnpack) return routed;
  Int8BatchEngine engine;
  engine.batch = batch;
  engine.threads = run_pool_threads(run);
  const std::string at_batch = "batch " + std::to_string(batch) + " on XNNPACK's int8 runtime (" +
                               std::to_string(engine.threads) + " thread(s))";
  const std::vector<std::int64_t> shape = batch_shape(batch, int8->sample_shape);
  std::string refused;
  const std::shared_ptr<const InferenceModel> runtime =
      checked_int8_runtime(int8, candidate, shape, engine.threads, refused);
  if (!runtime) {
    engine.reason = at_batch + " not used: " + refused;
    return std::make_shared<RecordedBatchEngine>(std::move(routed), std::move(engine));
  }
  torch::NoGradGuard no_grad;
  const Forward libtorch = forward_on(int8, engine.threads);
  const std::vector<double> fastest =
      fastest_alternating_ms({libtorch, forward_on(runtime, engine.threads)}, torch::rand(shape));
  engine.libtorch_ms = fastest[0];
  engine.xnnpack_ms = fastest[1];
  // the same threads on both sides: XNNPACK has to be >= 10% faster (no flip-flopping between loads)
  engine.xnnpack = fastest[1] <= 0.9 * fastest[0];
  engine.reason = at_batch + (engine.xnnpack ? " runs it: " : " kept out: ") +
                  format_number("%.3f", fastest[1]) + " ms vs " + format_number("%.3f", fastest[0]) +
                  " ms on LibTorch's int8 kernels";
  if (!engine.xnnpack) return std::make_shared<RecordedBatchEngine>(std::move(routed), std::move(engine));
  // partial batches padded with zero rows where that still wins, LibTorch's time taken as proportional to
  // the rows; never batch 1 (its own route decides)
  engine.min_rows = padded_min_rows(batch, fastest[0], fastest[1]);
  if (engine.min_rows < batch)
    engine.reason +=
        "; batches of " + std::to_string(engine.min_rows) + "-" + std::to_string(batch - 1) + " padded to it";
  spdlog::debug("{} {}: {}", int8->model_name, choice_name(int8->variant), engine.reason);
  BatchRouteModels models{routed, runtime, routed};
  if (run.replanned_threads) {
    engine.reason += "; a runtime for fewer threads is built when the plan shrinks";
    models.xnnpack_for_fewer_threads = [int8, candidate, shape](int threads, std::string& reason) {
      return checked_int8_runtime(int8, candidate, shape, threads, reason);
    };
  }
  std::shared_ptr<InferenceModel> route = xnnpack_batch_route(
      std::move(models), BatchRoutePlan{shape, engine.threads, engine.min_rows, fastest[0], fastest[1]});
  route->int8_batch_engine = std::move(engine);
  return route;
}

}  // namespace ipj::infer
