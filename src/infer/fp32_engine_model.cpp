// The fp32 variant's engine step that every format shares: eager or the frozen graph (timed, or checked
// when asked for), and one OpenMP thread at batch 1 when measured faster. Timing is on the load's threads.
#include <torch/types.h>

#include <algorithm>
#include <optional>
#include <string>

#include "graph_models.hpp"
#include "ipj/core/error.hpp"
#include "ipj/core/log.hpp"
#include "ipj/core/number_format.hpp"
#include "ipj/device/threading.hpp"
#include "ipj/infer/fp32_engine.hpp"

namespace ipj::infer {
namespace {

// Runs batch-1 inputs with the caller's OpenMP pool at one thread (measured faster at load), others as
// they come; describes itself as the model it wraps.
class OneThreadAtBatch1 : public InferenceModel {
 public:
  // at_batch1 false: runs every input as `inner` does (a model that records a measurement that kept the pool)
  explicit OneThreadAtBatch1(std::shared_ptr<const InferenceModel> inner, bool at_batch1 = true)
      : inner_(std::move(inner)), at_batch1_(at_batch1) {
    InferenceModel::operator=(*inner_);
  }
  torch::Tensor forward(const torch::Tensor& input) const override {
    if (!at_batch1_ || input.dim() == 0 || input.size(0) != 1) return inner_->forward(input);
    const device::CallerOpenMpThreads one_thread(1);
    return inner_->forward(input);
  }

 private:
  std::shared_ptr<const InferenceModel> inner_;
  bool at_batch1_ = true;
};

std::string batch_shape_text(std::int64_t batch, const std::vector<std::int64_t>& sample_shape) {
  std::string shape = std::to_string(batch);
  for (const std::int64_t size : sample_shape)
    shape += ", " + std::to_string(size);
  return "[" + shape + "]";
}

// `frozen` as asked (--fp32-engine frozen, the jit variant), checked once against eager on a random batch:
// LibTorch 1.13's optimize_for_inference miscomputes some graphs (a depthwise convolution + batch norm +
// hardswish), and a forced engine must not serve wrong numbers. An inexact frozen graph leaves eager running.
Fp32EngineChoice checked_frozen_choice(const InferenceModel& eager, const InferenceModel& frozen,
                                       const std::vector<std::int64_t>& sample_shape, const RunOptions& run) {
  Fp32EngineChoice choice;
  choice.requested = Fp32Engine::frozen;
  choice.engine = Fp32Engine::frozen;
  choice.reason = "frozen, as asked";
  if (sample_shape.empty()) {
    choice.reason += " (not checked against eager: no input shape; give --input-shape)";
    return choice;
  }
  choice.batch = std::max<std::int64_t>(run.fp32_engine_batch, 1);
  const auto forward_of = [](const InferenceModel& model) {
    return [&model](const torch::Tensor& input) { return model.forward(input); };
  };
  double difference = 0.0;
  try {
    difference = fp32_difference(forward_of(eager), forward_of(frozen), sample_shape, choice.batch);
  } catch (const std::exception& error) {  // the model fails on the random batch: nothing to compare
    choice.reason += " (not checked against eager: the model fails on a random " +
                     batch_shape_text(choice.batch, sample_shape) + " batch: " + error_cause(error.what()) +
                     ")";
    return choice;
  }
  choice.measured.push_back({Fp32Engine::frozen, 0.0, 0.0, difference, difference <= kFp32EngineTolerance});
  if (difference <= kFp32EngineTolerance) {
    choice.reason += ", checked: within " + format_number("%.2g", difference) + " of eager (relative)";
    return choice;
  }
  choice.engine = Fp32Engine::eager;
  choice.reason = "eager: frozen was asked for, but its graph differs from eager by " +
                  format_number("%.2g", difference) + " (relative) on a random " +
                  batch_shape_text(choice.batch, sample_shape) +
                  " batch (LibTorch's graph optimisation changed the results), so eager runs instead";
  spdlog::warn("{}", choice.reason);
  return choice;
}

}  // namespace

std::shared_ptr<InferenceModel> fp32_engine_model(
    std::shared_ptr<InferenceModel> eager,
    const std::function<std::shared_ptr<InferenceModel>()>& build_frozen,
    const std::vector<std::int64_t>& sample_shape, const RunOptions& run) {
  Fp32EngineChoice choice;
  choice.requested = run.fp32_engine;
  std::shared_ptr<InferenceModel> frozen;
  if (run.fp32_engine != Fp32Engine::eager) {
    try {
      frozen = build_frozen();
    } catch (const std::exception& error) {  // ipj's own checks, or LibTorch's freeze/optimize passes
      if (run.fp32_engine == Fp32Engine::frozen) throw;
      choice.reason = "eager: the frozen graph cannot be built (" + error_cause(error.what()) + ")";
    }
  }
  if (run.fp32_engine == Fp32Engine::eager) choice.reason = "eager, as asked";
  if (run.fp32_engine == Fp32Engine::frozen)
    choice = checked_frozen_choice(*eager, *frozen, sample_shape, run);
  if (frozen && run.fp32_engine == Fp32Engine::auto_select) {
    if (sample_shape.empty()) {
      choice.reason = "eager: no input shape to time the engines on (give --input-shape)";
    } else {
      const auto forward_of = [](const std::shared_ptr<InferenceModel>& model) {
        return [model](const torch::Tensor& input) { return model->forward(input); };
      };
      try {
        choice = choose_fp32_engine(
            {{Fp32Engine::eager, forward_of(eager)}, {Fp32Engine::frozen, forward_of(frozen)}}, sample_shape,
            run.fp32_engine_batch);
      } catch (const std::exception& error) {  // eager itself fails on a random [B, ...sample_shape] batch
        choice.reason = "eager: the model fails on a random " +
                        batch_shape_text(run.fp32_engine_batch, sample_shape) +
                        " batch, so the engines were not timed (" + error_cause(error.what()) + ")";
      }
    }
  }
  std::shared_ptr<InferenceModel> chosen = choice.engine == Fp32Engine::frozen ? frozen : eager;
  std::optional<Batch1Threads> batch1;
  if (run.fp32_engine == Fp32Engine::auto_select && !sample_shape.empty()) {
    try {
      batch1 =
          measure_batch1_threads([&chosen](const torch::Tensor& input) { return chosen->forward(input); },
                                 sample_shape, run.pool_threads);
    } catch (const std::exception&) {  // as above: the engine choice already says why nothing was timed
    }
  }
  if (batch1 && batch1->pool > 0) {
    choice.batch1_threads = batch1->threads;
    choice.batch1_one_thread_ms = batch1->one_thread_ms;
    if (batch1->threads == 1) choice.reason += "; " + batch1->describe();
  }
  if (batch1 && batch1->threads == 1) chosen = std::make_shared<OneThreadAtBatch1>(chosen);
  spdlog::debug("fp32 engine: {} ({})", choice_name(choice.engine), choice.reason);
  chosen->fp32_engine = choice;
  if (batch1 && batch1->pool > 0) chosen->batch1_threads = batch1;
  return chosen;
}

InferenceModelPtr with_measured_batch1_threads(InferenceModelPtr model, int pool_threads) {
  if (model->sample_shape.empty()) return model;
  Batch1Threads measured;
  try {
    measured = measure_batch1_threads([&model](const torch::Tensor& input) { return model->forward(input); },
                                      model->sample_shape, pool_threads);
  } catch (const std::exception& error) {  // the model fails on a random batch: later calls will say why
    spdlog::debug("batch-1 threads not measured: {}", error_cause(error.what()));
    return model;
  }
  if (measured.pool == 0) return model;
  auto result = std::make_shared<OneThreadAtBatch1>(model, /*at_batch1=*/measured.threads == 1);
  result->batch1_threads = measured;
  if (measured.threads == 1)
    spdlog::debug("{} {}: {}", model->model_name, choice_name(model->variant), measured.describe());
  return result;
}

std::shared_ptr<InferenceModel> jit_model(
    std::shared_ptr<InferenceModel> eager,
    const std::function<std::shared_ptr<InferenceModel>()>& build_frozen,
    const std::vector<std::int64_t>& sample_shape, const RunOptions& run) {
  RunOptions frozen = run;
  frozen.fp32_engine = Fp32Engine::frozen;
  return fp32_engine_model(std::move(eager), build_frozen, sample_shape, frozen);
}

}  // namespace ipj::infer
