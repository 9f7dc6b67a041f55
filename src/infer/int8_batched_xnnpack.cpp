// Static and QAT int8 variants' batches of one size on XNNPACK's int8 runtime on a pthreadpool of the run's
// threads (or the batch's rows split across one-thread runtimes, where that times faster), where it passes
// the batch-1 check and times faster at load than LibTorch's int8 kernels, then
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

// How a batch runs on XNNPACK's int8 runtime: one runtime on a pool of the run's threads, or its rows split
// across one-thread runtimes, one per thread (xnnpack_row_split_model).
enum class RuntimeForm { pool, row_split };

// The candidate's runtime for `shape` on `threads` in `form`, or null with `reason` where it cannot be built
// or disagrees with LibTorch's int8 kernels on the batch-1 check (run on the runtime's last row).
std::shared_ptr<const InferenceModel> checked_int8_runtime(const InferenceModelPtr& int8,
                                                           const Batch1Candidate& candidate,
                                                           const std::vector<std::int64_t>& shape,
                                                           int threads, std::string& reason,
                                                           RuntimeForm form = RuntimeForm::pool) {
  std::shared_ptr<InferenceModel> runtime;
  try {
    if (form == RuntimeForm::pool) {
      runtime = candidate.build(int8, shape[0], threads);
    } else {
      const RowRuntimeBuilder one_thread = [&candidate](std::int64_t rows) {
        return candidate.build(nullptr, rows, 1);
      };
      runtime = xnnpack_row_split_model(one_thread, shape[0], threads, int8);
    }
  } catch (const std::exception& error) {
    reason = error_cause(error.what());
    return nullptr;
  }
  torch::NoGradGuard no_grad;
  reason = candidate.disagreement(forward_on(int8, threads), last_row_of_batch(runtime, shape));
  return reason.empty() ? runtime : nullptr;
}

// The faster of `pooled` and its rows split across `threads` one-thread runtimes (where the batch has two
// rows per thread and the split passes the checks), timed alternating with LibTorch's int8 kernels: fills
// engine.libtorch_ms, xnnpack_ms and row_parts, and `forms` with both forms' times where both were timed;
// returns the runtime timed as xnnpack_ms.
std::shared_ptr<const InferenceModel> faster_int8_runtime(std::shared_ptr<const InferenceModel> pooled,
                                                          const InferenceModelPtr& int8,
                                                          const Batch1Candidate& candidate,
                                                          const std::vector<std::int64_t>& shape,
                                                          Int8BatchEngine& engine, std::string& forms) {
  std::string refused;
  const std::shared_ptr<const InferenceModel> split =
      row_split_worth_timing(shape[0], engine.threads)
          ? checked_int8_runtime(int8, candidate, shape, engine.threads, refused, RuntimeForm::row_split)
          : nullptr;
  if (!refused.empty()) spdlog::debug("{}: no row split: {}", int8->model_name, refused);
  std::vector<Forward> sides{forward_on(int8, engine.threads), forward_on(pooled, engine.threads)};
  if (split) sides.push_back(forward_on(split, engine.threads));
  const std::vector<double> fastest = fastest_alternating_ms(sides, torch::rand(shape));
  engine.libtorch_ms = fastest[0];
  engine.xnnpack_ms = fastest[1];
  if (!split) return pooled;
  forms = row_split_timings(engine.threads, fastest[1], fastest[2]);
  if (fastest[2] >= fastest[1]) return pooled;
  engine.xnnpack_ms = fastest[2];
  engine.row_parts = engine.threads;
  return split;
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
  const std::shared_ptr<const InferenceModel> pooled =
      checked_int8_runtime(int8, candidate, shape, engine.threads, refused);
  if (!pooled) {
    engine.reason = at_batch + " not used: " + refused;
    return std::make_shared<RecordedBatchEngine>(std::move(routed), std::move(engine));
  }
  torch::NoGradGuard no_grad;
  std::string forms;
  const std::shared_ptr<const InferenceModel> runtime =
      faster_int8_runtime(pooled, int8, candidate, shape, engine, forms);
  // the same threads on both sides: XNNPACK has to be >= 10% faster (no flip-flopping between loads)
  engine.xnnpack = engine.xnnpack_ms <= 0.9 * engine.libtorch_ms;
  engine.reason = at_batch + (engine.xnnpack ? " runs it: " : " kept out: ") +
                  format_number("%.3f", engine.xnnpack_ms) + " ms vs " +
                  format_number("%.3f", engine.libtorch_ms) + " ms on LibTorch's int8 kernels" + forms;
  if (!engine.xnnpack) return std::make_shared<RecordedBatchEngine>(std::move(routed), std::move(engine));
  // partial batches padded with zero rows where that still wins, LibTorch's time taken as proportional to
  // the rows; never batch 1 (its own route decides)
  engine.min_rows = padded_min_rows(batch, engine.libtorch_ms, engine.xnnpack_ms);
  if (engine.min_rows < batch)
    engine.reason +=
        "; batches of " + std::to_string(engine.min_rows) + "-" + std::to_string(batch - 1) + " padded to it";
  spdlog::debug("{} {}: {}", int8->model_name, choice_name(int8->variant), engine.reason);
  BatchRouteModels models{routed, runtime, routed};
  if (run.replanned_threads) {
    engine.reason += "; a runtime for fewer threads is built when the plan shrinks";
    models.xnnpack_for_fewer_threads = [int8, candidate, shape](int threads, const std::atomic<bool>&) {
      BatchRouteModels::FewerThreadsRuntime built;
      built.runtime = checked_int8_runtime(int8, candidate, shape, threads, built.note);
      return built;
    };
  }
  std::shared_ptr<InferenceModel> route = xnnpack_batch_route(
      std::move(models),
      BatchRoutePlan{shape, engine.threads, engine.min_rows, engine.libtorch_ms, engine.xnnpack_ms});
  route->int8_batch_engine = std::move(engine);
  return route;
}

}  // namespace ipj::infer
