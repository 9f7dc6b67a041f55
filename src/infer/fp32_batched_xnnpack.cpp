// The fp32 variant's larger batches on a runtime of the graph IR (XNNPACK's on a pthreadpool of the run's
// threads or its rows split across one-thread runtimes, or oneDNN's) where that is exact and timed faster at
// load than the engine chosen, routed by xnnpack_batch_route (xnnpack_batch_route.cpp); and batch 1 on an
// XNNPACK pool where it beats the calling thread for calls that come back to back. Limits: the batch size
// timed and somewhat smaller ones padded to it; other sizes run the chosen engine.
#include <torch/types.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>
#include <vector>

#include "graph_models.hpp"
#include "ipj/core/error.hpp"
#include "ipj/core/number_format.hpp"
#include "ipj/device/machine_load.hpp"
#include "ipj/device/threading.hpp"
#include "ipj/infer/fp32_engine.hpp"
#include "ipj/infer/onednn_runtime.hpp"
#include "ipj/infer/xnnpack_runtime.hpp"

namespace ipj::infer {
namespace {

// Past this the batch's arithmetic takes the load time too (timing both sides costs >= 12 such calls).
constexpr double kMaxTimedBatchMs = 250.0;
// A shrunk plan's runtime forms are built and timed on its threads where a batch on them takes at most
// this (the plan's runtime's time x its threads / theirs): in the background of a busy server.
constexpr double kMaxFewerThreadsTimedBatchMs = 50.0;

// The chosen engine's batch time as the engine choice measured it (0: not measured).
double chosen_batch_ms(const Fp32EngineChoice& choice) {
  for (const EngineMeasurement& measured : choice.measured)
    if (measured.engine == choice.engine) return measured.batch_ms;
  return 0.0;
}

// A runtime for [batch, ...sample_shape]: XNNPACK's on a pool of `threads` (concurrent calls wait: the route
// keeps them off it), its rows split across `threads` one-thread runtimes, or oneDNN's, checked against
// eager on pixels and normal(0, 2) values; null when it cannot be built or differs (the reason says which).
std::shared_ptr<InferenceModel> checked_runtime(const std::shared_ptr<InferenceModel>& eager,
                                                const GraphIrSource& graph_ir,
                                                const std::vector<std::int64_t>& sample_shape,
                                                std::int64_t batch, int threads, std::string& reason,
                                                BatchRuntimeForm form = BatchRuntimeForm::xnnpack_pool,
                                                const std::atomic<bool>* cancelled = nullptr) {
  std::shared_ptr<InferenceModel> runtime;
  double difference = INFINITY;
  try {
    if (form == BatchRuntimeForm::onednn) {
      runtime = onednn_runtime_model(graph_ir(), batch, threads);
    } else if (form == BatchRuntimeForm::xnnpack_split) {
      const quant::Graph graph = graph_ir();
      const RowRuntimeBuilder one_thread = [&graph](std::int64_t rows) {
        return xnnpack_runtime_model(graph, rows, 1);
      };
      runtime = xnnpack_row_split_model(one_thread, batch, threads);
    } else {
      runtime = xnnpack_runtime_model(graph_ir(), batch, threads);
    }
    if (cancelled && *cancelled) {  // a route closing: its check (several eager batches) is not wanted
      reason = "cancelled: the route is closing";
      return nullptr;
    }
    const Forward reference = [&eager](const torch::Tensor& input) { return eager->forward(input); };
    const Forward candidate = [&runtime](const torch::Tensor& input) { return runtime->forward(input); };
    difference = xnnpack_difference(*eager, *runtime, sample_shape,
                                    fp32_difference(reference, candidate, sample_shape, batch), batch);
  } catch (const std::exception& error) {  // a node XNNPACK cannot take, or it fails on this model
    reason = error_cause(error.what());
    return nullptr;
  }
  if (difference <= kFp32EngineTolerance) return runtime;
  reason = "differs from eager by " + format_number("%.2g", difference) + " (relative)";
  return nullptr;
}

const char* form_name(BatchRuntimeForm form) {
  return form == BatchRuntimeForm::onednn ? "oneDNN runtime" : "XNNPACK runtime";
}

// What a route's logs call a runtime of `form`.
const char* route_runtime_name(BatchRuntimeForm form) {
  return form == BatchRuntimeForm::onednn          ? "oneDNN's runtime"
         : form == BatchRuntimeForm::xnnpack_split ? "XNNPACK's row split"
                                                   : "XNNPACK's runtime";
}

// The forms a shrunk plan's runtime on `threads` may take, preferred first: the plan's own where it runs on
// them (a row split needs two threads and two rows each); unless only that one, oneDNN's and XNNPACK's on a
// pool where this build has them.
std::vector<BatchRuntimeForm> fewer_threads_forms(const FewerThreadsPlan& plan, int threads) {
  std::vector<BatchRuntimeForm> forms;
  if (plan.form != BatchRuntimeForm::xnnpack_split || row_split_worth_timing(plan.batch, threads))
    forms.push_back(plan.form);
  if (plan.only_plan_form) return forms;
  for (const BatchRuntimeForm other : {BatchRuntimeForm::onednn, BatchRuntimeForm::xnnpack_pool}) {
    const bool built_here =
        other == BatchRuntimeForm::onednn ? onednn_runtime_available() : xnnpack_runtime_available();
    if (built_here && std::find(forms.begin(), forms.end(), other) == forms.end()) forms.push_back(other);
  }
  return forms;
}

// The runtimes a batch size was timed on beside the chosen engine.
struct TimedRuntimes {
  double chosen_ms = 0.0;
  double best_ms = INFINITY;  // the fastest runtime's
  BatchRuntimeForm best = BatchRuntimeForm::xnnpack_pool;
  std::string forms;  // "; XNNPACK on a pool of 2 2.100 ms, ..." where more than one form was timed
};

// Every runtime form that builds and is exact (`pool`: XNNPACK's on the pool, given; its rows split across
// `threads` one-thread runtimes where the batch has two rows per thread; oneDNN's), timed alternating with
// `chosen` on the same threads; `pool` becomes the fastest (choice.batch_xnnpack_row_parts set for the
// split), choice.batch_xnnpack_ms / batch_onednn_ms record what XNNPACK's and oneDNN's best forms took.
TimedRuntimes time_runtime_forms(const std::shared_ptr<InferenceModel>& chosen,
                                 std::shared_ptr<InferenceModel>& pool,
                                 const std::shared_ptr<InferenceModel>& eager, const GraphIrSource& graph_ir,
                                 const std::vector<std::int64_t>& sample_shape, int threads,
                                 Fp32EngineChoice& choice) {
  const std::int64_t batch = choice.batch;
  std::vector<std::pair<BatchRuntimeForm, std::shared_ptr<InferenceModel>>> candidates;
  if (pool) candidates.emplace_back(BatchRuntimeForm::xnnpack_pool, pool);
  for (const BatchRuntimeForm form : {BatchRuntimeForm::xnnpack_split, BatchRuntimeForm::onednn}) {
    const bool worth = form == BatchRuntimeForm::onednn ? onednn_runtime_available()
                                                        : pool && row_split_worth_timing(batch, threads);
    std::string refused;
    auto runtime =
        worth ? checked_runtime(eager, graph_ir, sample_shape, batch, threads, refused, form) : nullptr;
    if (!refused.empty())
      choice.reason += std::string("; ") + form_name(form) + " at batch " + std::to_string(batch) +
                       " not used: " + cause_once(choice.reason, refused);
    if (runtime) candidates.emplace_back(form, std::move(runtime));
  }
  TimedRuntimes timed;
  if (candidates.empty()) return timed;
  std::vector<Forward> sides{forward_on(chosen, threads)};
  for (const auto& candidate : candidates)
    sides.push_back(forward_on(candidate.second, threads));
  const std::vector<double> fastest =
      fastest_alternating_ms(sides, torch::rand(batch_shape(batch, sample_shape)));
  timed.chosen_ms = fastest[0];
  for (std::size_t index = 0; index < candidates.size(); ++index) {
    const BatchRuntimeForm form = candidates[index].first;
    const double ms = fastest[index + 1];
    double& recorded = form == BatchRuntimeForm::onednn ? choice.batch_onednn_ms : choice.batch_xnnpack_ms;
    recorded = recorded > 0.0 ? std::min(recorded, ms) : ms;
    timed.forms += std::string(index == 0 ? "; " : ", ") +
                   (form == BatchRuntimeForm::xnnpack_pool ? "XNNPACK on a pool of " + std::to_string(threads)
                    : form == BatchRuntimeForm::xnnpack_split
                        ? "XNNPACK rows split across " + std::to_string(threads) + " one-thread runtimes"
                        : std::string("oneDNN")) +
                   " " + format_number("%.3f", ms) + " ms" + onednn_winograd_note(*candidates[index].second);
    if (ms >= timed.best_ms) continue;
    timed.best_ms = ms;
    timed.best = form;
    pool = candidates[index].second;
  }
  if (timed.best == BatchRuntimeForm::xnnpack_split) choice.batch_xnnpack_row_parts = threads;
  return timed;
}

}  // namespace

BatchRouteModels::RuntimeBuilder fewer_threads_builder(const std::shared_ptr<InferenceModel>& eager,
                                                       const GraphIrSource& graph_ir,
                                                       const std::vector<std::int64_t>& sample_shape,
                                                       const FewerThreadsPlan& plan) {
  return [eager, graph_ir, sample_shape, plan](int threads, const std::atomic<bool>& cancelled) {
    BatchRouteModels::FewerThreadsRuntime built;
    const std::vector<BatchRuntimeForm> forms = fewer_threads_forms(plan, threads);
    // cheap to time on them: every form that builds, the fastest kept; else the first that builds
    const bool timed = plan.runtime_ms > 0.0 &&
                       plan.runtime_ms * plan.threads / std::max(threads, 1) <= kMaxFewerThreadsTimedBatchMs;
    std::vector<std::pair<BatchRuntimeForm, std::shared_ptr<InferenceModel>>> runtimes;
    std::string refusals;
    for (const BatchRuntimeForm form : forms) {
      if (cancelled)
        return BatchRouteModels::FewerThreadsRuntime{nullptr, "", "cancelled: the route is closing"};
      std::string refused;
      auto runtime =
          checked_runtime(eager, graph_ir, sample_shape, plan.batch, threads, refused, form, &cancelled);
      if (!runtime)
        refusals += std::string(refusals.empty() ? "" : "; ") + route_runtime_name(form) + ": " + refused;
      else
        runtimes.emplace_back(form, std::move(runtime));
      if (!timed && !runtimes.empty()) break;
    }
    if (runtimes.empty()) {
      built.note =
          forms.empty() ? "no runtime form runs on " + std::to_string(threads) + " thread(s)" : refusals;
      return built;
    }
    std::size_t fastest_index = 0;
    std::string timings;
    if (runtimes.size() > 1 && !cancelled) {
      torch::NoGradGuard no_grad;
      std::vector<Forward> sides;
      for (const auto& runtime : runtimes)
        sides.push_back(forward_on(runtime.second, threads));
      const std::vector<double> fastest =
          fastest_alternating_ms(sides, torch::rand(batch_shape(plan.batch, sample_shape)));
      for (std::size_t index = 0; index < runtimes.size(); ++index) {
        if (fastest[index] < fastest[fastest_index]) fastest_index = index;
        timings += std::string(index == 0 ? "" : ", ") + route_runtime_name(runtimes[index].first) + " " +
                   format_number("%.3f", fastest[index]) + " ms";
      }
    }
    const BatchRuntimeForm form = runtimes[fastest_index].first;
    built.runtime = runtimes[fastest_index].second;
    if (form != plan.form) built.name = route_runtime_name(form);
    if (forms.front() != plan.form)
      built.note = std::string(route_runtime_name(plan.form)) + " needs 2 threads and 2 rows each";
    if (!timings.empty())
      built.note += std::string(built.note.empty() ? "" : "; ") + "the fastest on them: " + timings;
    return built;
  };
}

Forward forward_on(const std::shared_ptr<const InferenceModel>& model, int threads) {
  return [model, threads](const torch::Tensor& input) {
    const device::CallerOpenMpThreads scope(threads);
    return model->forward(input);
  };
}

bool row_split_worth_timing(std::int64_t batch, int threads) {
  return threads >= 2 && batch >= 2 * static_cast<std::int64_t>(threads);
}

std::string row_split_timings(int threads, double pool_ms, double split_ms) {
  return "; one runtime on a pool of " + std::to_string(threads) + " " + format_number("%.3f", pool_ms) +
         " ms, its rows split across " + std::to_string(threads) + " one-thread runtimes " +
         format_number("%.3f", split_ms) + " ms";
}

int run_pool_threads(const RunOptions& run) {
  return std::max(1, run.pool_threads > 0 ? run.pool_threads : device::read_cpu_limits().available_cpus);
}

bool batch1_pool_wins(double thread_ms, double pool_ms, double cpu_ratio, Preference prefer) {
  if (!(pool_ms > 0.0) || pool_ms * kBatch1PoolMinSpeedup > thread_ms) return false;
  // the pool spends more CPU per call (its worker's wake-up and hand-offs): for joules it has to buy its
  // speed for little more CPU, else the calling thread keeps batch 1
  return prefer == Preference::latency || (cpu_ratio > 0.0 && cpu_ratio <= kBatch1PoolMaxCpuRatio);
}

std::shared_ptr<InferenceModel> with_batch1_xnnpack_pool(const std::shared_ptr<InferenceModel>& eager,
                                                         std::shared_ptr<InferenceModel> chosen,
                                                         const GraphIrSource& graph_ir,
                                                         const std::vector<std::int64_t>& sample_shape,
                                                         const RunOptions& run, Fp32EngineChoice& choice) {
  const int threads = run_pool_threads(run);
  if (choice.requested != Fp32Engine::auto_select || choice.batch1_engine != Fp32Engine::xnnpack ||
      choice.batch1_xnnpack_form != XnnpackForm::runtime || !graph_ir || sample_shape.empty() || threads < 2)
    return chosen;
  std::string refused;
  const auto pool = checked_runtime(eager, graph_ir, sample_shape, 1, threads, refused);
  if (!pool) {
    choice.reason += "; no XNNPACK pool at batch 1: " + cause_once(choice.reason, refused);
    return chosen;
  }
  torch::NoGradGuard no_grad;
  const std::vector<std::int64_t> shape = batch_shape(1, sample_shape);
  const torch::Tensor single = torch::rand(shape);  // [1, ...sample] in [0, 1)
  const std::vector<Forward> sides{forward_on(chosen, threads), forward_on(pool, threads)};
  const std::vector<double> fastest = fastest_alternating_ms(sides, single);
  const std::vector<double> cpu_ms = cpu_ms_per_call(sides, single, fastest[1]);
  choice.batch1_pool_ms = fastest[1];
  choice.batch1_pool_cpu_ratio = cpu_ms[0] > 0.0 && std::isfinite(cpu_ms[1]) ? cpu_ms[1] / cpu_ms[0] : 0.0;
  const bool wins = batch1_pool_wins(fastest[0], fastest[1], choice.batch1_pool_cpu_ratio, run.prefer);
  choice.reason +=
      "; batch 1 on XNNPACK's pool of " + std::to_string(threads) +
      (wins ? " when calls come within " + format_number("%.1f", kBatch1PoolGapMs) + " ms of each other: "
            : " kept out: ") +
      format_number("%.3f", fastest[1]) + " ms vs " + format_number("%.3f", fastest[0]) +
      " ms on the calling thread at " + format_number("%.2f", choice.batch1_pool_cpu_ratio) +
      "x its CPU per call" +
      (run.prefer == Preference::latency ? " (--prefer latency: the CPU not weighed)" : "");
  if (!wins) return chosen;
  choice.batch1_pool_threads = threads;
  BatchRoutePlan plan{shape, threads, 1, fastest[0], fastest[1]};
  plan.max_gap_ms = kBatch1PoolGapMs;
  plan.alone_only = true;  // concurrent requests: one core each beats a pool of two for one of them
  return xnnpack_batch_route(BatchRouteModels{chosen, pool, chosen}, std::move(plan));
}

std::shared_ptr<InferenceModel> with_batched_xnnpack(const std::shared_ptr<InferenceModel>& eager,
                                                     std::shared_ptr<InferenceModel> chosen,
                                                     const GraphIrSource& graph_ir,
                                                     const std::vector<std::int64_t>& sample_shape,
                                                     const RunOptions& run, Fp32EngineChoice& choice) {
  choice.batch_engine = choice.engine;
  choice.prefer = run.prefer;
  const std::int64_t batch = choice.batch;
  const bool forced = choice.requested == Fp32Engine::xnnpack;  // its runtime, checked (LibTorch's XNNPACK
                                                                // graph may have differed: eager then)
  const bool onednn = !forced && onednn_runtime_available();
  if (!graph_ir || sample_shape.empty() || batch <= 1 || (!xnnpack_runtime_available() && !onednn))
    return chosen;
  if (!run.batched_xnnpack) {
    choice.reason += "; no runtime for batch " + std::to_string(batch) + " (no row runs that size)";
    return chosen;
  }
  if (!forced && chosen_batch_ms(choice) > kMaxTimedBatchMs) {
    choice.reason += "; no runtime tried at batch " + std::to_string(batch) + " (" +
                     format_number("%.0f", chosen_batch_ms(choice)) + " ms per batch)";
    return chosen;
  }
  const int threads = run_pool_threads(run);
  const std::string at_batch = "XNNPACK runtime at batch " + std::to_string(batch);
  std::string refused;
  auto runtime = xnnpack_runtime_available()
                     ? checked_runtime(eager, graph_ir, sample_shape, batch, threads, refused)
                     : nullptr;
  if (!runtime && !refused.empty())
    choice.reason += "; " + at_batch + " not used: " + cause_once(choice.reason, refused);
  if (!runtime && !onednn) return chosen;
  choice.batch_xnnpack_threads = threads;
  const std::vector<std::int64_t> shape = batch_shape(batch, sample_shape);
  const std::string on_threads = ", " + std::to_string(threads) + " thread(s)";
  if (forced) {  // larger batches on XNNPACK's operators, batch `batch` on its runtime
    choice.batch_engine = Fp32Engine::xnnpack;
    choice.batch_xnnpack_min_rows = batch;
    choice.reason += "; batch " + std::to_string(batch) + " on XNNPACK runtime (checked" + on_threads + ")";
    if (run.replanned_threads)
      choice.reason += "; a runtime for fewer threads is built when the plan shrinks";
    return xnnpack_batch_route(
        BatchRouteModels{chosen, runtime, eager,
                         run.replanned_threads ? fewer_threads_builder(eager, graph_ir, sample_shape,
                                                                       {BatchRuntimeForm::xnnpack_pool, batch,
                                                                        threads, 0.0, true})
                                               : BatchRouteModels::RuntimeBuilder{}},
        BatchRoutePlan{shape, threads, batch});
  }
  torch::NoGradGuard no_grad;
  const TimedRuntimes timed =
      time_runtime_forms(chosen, runtime, eager, graph_ir, sample_shape, threads, choice);
  if (!runtime) return chosen;  // nothing built, or exact (the reason says why)
  const std::vector<double> fastest{timed.chosen_ms, timed.best_ms};
  // the same threads on both sides: the runtime has to be >= 10% faster (no flip-flopping between loads)
  const bool wins = fastest[1] <= 0.9 * fastest[0];
  choice.reason += std::string("; ") + form_name(timed.best) + " at batch " + std::to_string(batch) +
                   (wins ? " runs it: " : " kept out: ") + format_number("%.3f", fastest[1]) + " ms vs " +
                   format_number("%.3f", fastest[0]) + " ms (" + choice_name(choice.engine) + ")" +
                   on_threads + timed.forms;
  if (!wins) return chosen;
  choice.batch_engine = timed.best == BatchRuntimeForm::onednn ? Fp32Engine::onednn : Fp32Engine::xnnpack;
  // Smaller batches (a server's partial ones) padded with zero rows up to `batch` where that still wins by
  // the same margin, the chosen engine's time taken as proportional to the rows (an underestimate where it
  // has a fixed cost per call). Never batch 1: its own route (one thread or XNNPACK on the calling thread)
  // decides.
  choice.batch_xnnpack_min_rows = padded_min_rows(batch, fastest[0], fastest[1]);
  if (choice.batch_xnnpack_min_rows < batch)
    choice.reason += "; batches of " + std::to_string(choice.batch_xnnpack_min_rows) + "-" +
                     std::to_string(batch - 1) + " padded to it";
  if (run.replanned_threads) choice.reason += "; a runtime for fewer threads is built when the plan shrinks";
  BatchRoutePlan plan{shape, threads, choice.batch_xnnpack_min_rows, fastest[0], fastest[1]};
  plan.runtime_name = route_runtime_name(timed.best);
  return xnnpack_batch_route(
      BatchRouteModels{chosen, runtime, chosen,
                       run.replanned_threads
                           ? fewer_threads_builder(eager, graph_ir, sample_shape,
                                                   {timed.best, batch, threads, timed.best_ms, false})
                           : BatchRouteModels::RuntimeBuilder{}},
      std::move(plan));
}

std::shared_ptr<InferenceModel> with_forced_onednn(const std::shared_ptr<InferenceModel>& eager,
                                                   std::shared_ptr<InferenceModel> chosen,
                                                   const GraphIrSource& graph_ir,
                                                   const std::vector<std::int64_t>& sample_shape,
                                                   const RunOptions& run, Fp32EngineChoice& choice) {
  const std::int64_t batch = std::max<std::int64_t>(run.fp32_engine_batch, 1);
  std::string refused = "this model has no graph IR";
  const std::shared_ptr<InferenceModel> runtime =
      graph_ir && !sample_shape.empty()
          ? checked_runtime(eager, graph_ir, sample_shape, batch, run_pool_threads(run), refused,
                            BatchRuntimeForm::onednn)
          : nullptr;
  if (!runtime)
    fail(ErrorCategory::unsupported, "--fp32-engine onednn: oneDNN's runtime of this model at batch " +
                                         std::to_string(batch) + " cannot run (" + refused +
                                         "); --fp32-engine auto or frozen run it");
  choice.batch = batch;
  choice.batch_engine = Fp32Engine::onednn;
  choice.batch_xnnpack_min_rows = batch;
  choice.reason += "; batch " + std::to_string(batch) + " on oneDNN's runtime (checked), as asked" +
                   onednn_winograd_note(*runtime);
  BatchRoutePlan plan{batch_shape(batch, sample_shape), run_pool_threads(run), batch};
  plan.runtime_name = "oneDNN's runtime";
  return xnnpack_batch_route(BatchRouteModels{std::move(chosen), runtime, eager}, std::move(plan));
}

}  // namespace ipj::infer
