// The fp32 variant's engine step that every format shares: eager or the frozen graph (timed, or checked
// when asked for), then batch 1 on one OpenMP thread and/or XNNPACK (its runtime of the graph IR, else
// LibTorch's XNNPACK graph; on the calling thread) when measured faster. Timing is on the load's threads.
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "graph_models.hpp"
#include "ipj/core/error.hpp"
#include "ipj/core/log.hpp"
#include "ipj/core/number_format.hpp"
#include "ipj/core/torch_compat.hpp"
#include "ipj/device/threading.hpp"
#include "ipj/infer/fp32_engine.hpp"
#include "ipj/infer/onednn_runtime.hpp"
#include "ipj/infer/xnnpack_runtime.hpp"

namespace ipj::infer {
namespace {

// Where each input runs: [1, ...sample_shape] on `batch1` (with the caller's OpenMP pool at one thread when
// that measured faster at load), other batches of that shape on `batched`, any other shape on `fallback`
// (the engine that reports a wrong shape itself: XNNPACK's operators do not check input sizes and read past
// a smaller tensor). An empty sample_shape routes by batch size alone. Describes itself as `described`.
// `tame_batch1`: batch 1 is XNNPACK, whose fused clamps turn a NaN into a number (ReLU(NaN) = 0), so an input
// that holds a non-finite value or one large enough to overflow float inside (|x| > kLargestXnnpackInput)
// goes to `fallback`, which answers as eager does.
class EngineRoute : public InferenceModel {
 public:
  struct Models {
    std::shared_ptr<const InferenceModel> batch1, batched, fallback;
  };
  EngineRoute(const InferenceModel& described, Models models, std::vector<std::int64_t> sample_shape,
              bool one_thread, bool tame_batch1 = false)
      : models_(std::move(models)),
        sample_shape_(std::move(sample_shape)),
        one_thread_(one_thread),
        tame_batch1_(tame_batch1) {
    InferenceModel::operator=(described);
  }
  torch::Tensor forward(const torch::Tensor& input) const override {
    if (!sample_shape_.empty() && (input.dim() != static_cast<std::int64_t>(sample_shape_.size()) + 1 ||
                                   !input.sizes().slice(1).equals(sample_shape_)))
      return models_.fallback->forward(input);
    if (input.dim() == 0 || input.size(0) != 1) return models_.batched->forward(input);
    if (tame_batch1_ && !tame_for_xnnpack(input)) return models_.fallback->forward(input);
    if (!one_thread_) return models_.batch1->forward(input);
    const device::CallerOpenMpThreads one_thread(1);
    return models_.batch1->forward(input);
  }

 private:
  Models models_;
  std::vector<std::int64_t> sample_shape_;
  bool one_thread_ = false;
  bool tame_batch1_ = false;
};

// `model` everywhere, batch 1 on one OpenMP thread.
std::shared_ptr<InferenceModel> one_thread_at_batch1(const std::shared_ptr<InferenceModel>& model) {
  return std::make_shared<EngineRoute>(*model, EngineRoute::Models{model, model, model},
                                       std::vector<std::int64_t>{}, true);
}

// XNNPACK's graph run on the calling thread alone: no pthreadpool (its idle workers spin for milliseconds
// and would take the cores from the OpenMP pool of the next batch) and one OpenMP thread for the operators
// XNNPACK does not take. At batch 1 the work per operator is too small to share.
class OnCallingThread : public InferenceModel {
 public:
  explicit OnCallingThread(std::shared_ptr<const InferenceModel> inner) : inner_(std::move(inner)) {
    InferenceModel::operator=(*inner_);
  }
  torch::Tensor forward(const torch::Tensor& input) const override {
    const compat::XnnpackOnCallingThread no_pthreadpool;
    const device::CallerOpenMpThreads one_thread(1);
    return inner_->forward(input);
  }

 private:
  std::shared_ptr<const InferenceModel> inner_;
};

Forward forward_of(const std::shared_ptr<const InferenceModel>& model) {
  return [model](const torch::Tensor& input) { return model->forward(input); };
}

// The same for a model the caller keeps alive.
Forward forward_of(const InferenceModel& model) {
  return [&model](const torch::Tensor& input) { return model.forward(input); };
}

std::string batch_shape_text(std::int64_t batch, const std::vector<std::int64_t>& sample_shape) {
  std::string shape = std::to_string(batch);
  for (const std::int64_t size : sample_shape)
    shape += ", " + std::to_string(size);
  return "[" + shape + "]";
}

// `frozen` or `xnnpack` as asked (--fp32-engine, the jit variant; `requested` onednn: frozen for the batch
// sizes its runtime does not take), checked once against eager on a random batch and on wide values
// (fp32_wide_difference): LibTorch 1.13's
// optimize_for_inference miscomputes some graphs (a depthwise convolution + batch norm + hardswish), and a
// forced engine must not serve wrong numbers. An inexact graph leaves eager running. A frozen graph that
// cannot be checked (no shape, eager fails on the batch) runs as asked; an XNNPACK graph is refused then (its
// operators do not check input sizes: a model that does not fit reads past its input).
Fp32EngineChoice checked_choice(Fp32Engine engine, Fp32Engine requested, const InferenceModel& eager,
                                const InferenceModel& graph, const std::vector<std::int64_t>& sample_shape,
                                const RunOptions& run) {
  Fp32EngineChoice choice;
  choice.requested = requested;
  choice.engine = engine;
  const bool as_asked = requested == engine;
  choice.reason = choice_name(engine) + (as_asked ? ", as asked" : " for other batch sizes");
  const std::string refused = "--fp32-engine xnnpack: XNNPACK's graph runs only once checked against eager, ";
  if (sample_shape.empty()) {
    if (engine == Fp32Engine::xnnpack)
      fail(ErrorCategory::usage, refused + "and this model has no input shape (give --input-shape)");
    choice.reason += " (not checked against eager: no input shape; give --input-shape)";
    return choice;
  }
  choice.batch = std::max<std::int64_t>(run.fp32_engine_batch, 1);
  double difference = 0.0;
  try {
    difference = fp32_difference(forward_of(eager), forward_of(graph), sample_shape, choice.batch);
    difference = xnnpack_difference(eager, graph, sample_shape, difference, choice.batch);  // wide values
  } catch (const Error& error) {  // ipj's check of what the model answers (a tuple, complex values): no shape
    fail(error.category(), "--fp32-engine " + choice_name(requested) + ": " + error.what());
  } catch (const std::exception& error) {  // the model fails on the random batch: nothing to compare
    const std::string cause = "the model fails on a random " + batch_shape_text(choice.batch, sample_shape) +
                              " batch: " + error_cause(error.what());
    if (engine == Fp32Engine::xnnpack)
      fail(ErrorCategory::usage, refused + "and " + cause + " (is --input-shape the model's?)");
    choice.reason += " (not checked against eager: " + cause + ")";
    return choice;
  }
  choice.measured.push_back({engine, 0.0, 0.0, difference, difference <= kFp32EngineTolerance});
  if (difference <= kFp32EngineTolerance) {
    choice.reason += ", checked: within " + format_number("%.2g", difference) + " of eager (relative)";
    return choice;
  }
  choice.engine = Fp32Engine::eager;
  choice.reason = "eager: " + choice_name(engine) +
                  (as_asked ? " was asked for" : " (for other batch sizes)") +
                  ", but its graph differs from eager by " + format_number("%.2g", difference) +
                  " (relative) on random " + batch_shape_text(choice.batch, sample_shape) +
                  " inputs (LibTorch's graph optimisation changed the results), so eager runs instead";
  spdlog::warn("{}", choice.reason);
  return choice;
}

// auto: eager vs the frozen graph timed at batch 1 and at run.fp32_engine_batch (choose_fp32_engine).
Fp32EngineChoice timed_choice(const std::shared_ptr<InferenceModel>& eager,
                              const std::shared_ptr<InferenceModel>& frozen,
                              const std::vector<std::int64_t>& sample_shape, const RunOptions& run) {
  Fp32EngineChoice choice;
  if (sample_shape.empty()) {
    choice.reason = "eager: no input shape to time the engines on (give --input-shape)";
    return choice;
  }
  try {
    return choose_fp32_engine(
        {{Fp32Engine::eager, forward_of(eager)}, {Fp32Engine::frozen, forward_of(frozen)}}, sample_shape,
        run.fp32_engine_batch);
  } catch (const std::exception& error) {  // eager itself fails on a random [B, ...sample_shape] batch
    choice.reason = "eager: the model fails on a random " +
                    batch_shape_text(run.fp32_engine_batch, sample_shape) +
                    " batch, so the engines were not timed (" + error_cause(error.what()) + ")";
  }
  return choice;
}

// Above this batch-1 time the convolutions' arithmetic, not the per-operator cost XNNPACK saves, is the
// time: XNNPACK lost every such case measured (MobileNetV2 at 3x224x224 19.8 vs 8.8 ms frozen; it won at
// 0.2-1.5 ms), so auto does not spend the load time and memory (about twice the weights) to try it.
constexpr double kXnnpackMaxBatch1Ms = 5.0;

// A batch-1 XNNPACK candidate: the runtime of the graph IR (one plan, on the calling thread; while another
// call holds it, batch 1 runs on `busy`), else LibTorch's optimizeForMobile graph on the calling thread.
// `refused`: why the runtime was not built ("" when it was, or when there is no graph IR).
struct XnnpackCandidate {
  std::shared_ptr<InferenceModel> model;
  XnnpackForm form = XnnpackForm::none;
  std::string refused;
};

XnnpackCandidate xnnpack_candidate(const GraphIrSource& graph_ir, const GraphBuilder& build_graph,
                                   const std::shared_ptr<InferenceModel>& busy) {
  XnnpackCandidate candidate;
  if (graph_ir) {
    try {
      candidate.model = xnnpack_runtime_model(graph_ir(), 1, 1, busy);
      candidate.form = XnnpackForm::runtime;
      return candidate;
    } catch (const std::exception& error) {  // no XNNPACK in this build, or a node it cannot take
      candidate.refused = error_cause(error.what());
      spdlog::debug("xnnpack runtime not built: {}", candidate.refused);
    }
  }
  candidate.model = std::make_shared<OnCallingThread>(build_graph(Freezing::xnnpack));
  candidate.form = XnnpackForm::operators;
  return candidate;
}

// oneDNN's runtime of the graph IR for batch 1 on the calling thread (`chosen` runs calls that find it held),
// where this build has it and it is exact as XNNPACK's must be (pixels and normal(0, 2) values); else null,
// with why in `refused` ("differs from eager by ...", or the node it cannot take).
std::shared_ptr<InferenceModel> checked_onednn_at_batch1(const std::shared_ptr<InferenceModel>& eager,
                                                         const GraphIrSource& graph_ir,
                                                         const std::shared_ptr<InferenceModel>& chosen,
                                                         const std::vector<std::int64_t>& sample_shape,
                                                         std::string& refused) {
  refused = !graph_ir ? "this model has no graph IR" : "this build has no oneDNN";
  if (!graph_ir || !onednn_runtime_available()) return nullptr;
  try {
    auto runtime = onednn_runtime_model(graph_ir(), 1, 1, OnednnConvolutionKernel::timed, chosen);
    double difference = fp32_difference(forward_of(eager), forward_of(runtime), sample_shape, 1);
    difference = xnnpack_difference(*eager, *runtime, sample_shape, difference);
    if (difference <= kFp32EngineTolerance) return runtime;
    refused = "differs from eager by " + format_number("%.2g", difference) + " (relative)";
  } catch (const std::exception& error) {  // a node it cannot take, or it fails on this model
    refused = error_cause(error.what());
    spdlog::debug("oneDNN runtime not built for batch 1: {}", refused);
  }
  return nullptr;
}

// What runs batch-1 inputs instead of the route chosen so far (null model: that route stays).
struct Batch1Runtime {
  std::shared_ptr<InferenceModel> model;
  Fp32Engine engine = Fp32Engine::xnnpack;
};

// XNNPACK for batch-1 inputs (xnnpack_candidate, on the calling thread), when it is exact (pixels and
// normal(0, 2) values) and beats the batch-1 route chosen so far by the tie rule below (`chosen` on
// `route_threads` OpenMP threads, whose fastest call took `route_ms`); oneDNN's runtime instead where
// XNNPACK's runtime is exact and oneDNN's, timed beside it, is >= 10% faster than it and beats the route by
// the same rule. Records the timings in `choice` and says why in its reason.
Batch1Runtime faster_runtime_at_batch1(const std::shared_ptr<InferenceModel>& eager,
                                       const GraphBuilder& build_graph, const GraphIrSource& graph_ir,
                                       const std::shared_ptr<InferenceModel>& chosen, int route_threads,
                                       double route_ms, const std::vector<std::int64_t>& sample_shape,
                                       Fp32EngineChoice& choice) {
  if (route_ms > kXnnpackMaxBatch1Ms) {
    choice.reason += "; xnnpack not tried (batch 1 takes " + format_number("%.1f", route_ms) + " ms)";
    return {};
  }
  XnnpackCandidate xnnpack;
  double difference = INFINITY;
  try {
    xnnpack = xnnpack_candidate(graph_ir, build_graph, chosen);
    difference = fp32_difference(forward_of(eager), forward_of(xnnpack.model), sample_shape, 1);
    difference = xnnpack_difference(*eager, *xnnpack.model, sample_shape, difference);
  } catch (const std::exception& error) {  // no XNNPACK here, nothing it takes, or it fails on this model
    spdlog::debug("xnnpack not timed: {}", error_cause(error.what()));
    return {};
  }
  const std::string name = xnnpack.form == XnnpackForm::runtime ? "XNNPACK runtime" : "XNNPACK operators";
  if (!xnnpack.refused.empty())
    choice.reason += "; no XNNPACK runtime (" + cause_once(choice.reason, xnnpack.refused) + ")";
  const bool exact = difference <= kFp32EngineTolerance;
  if (!exact) {
    choice.measured.push_back({Fp32Engine::xnnpack, 0.0, 0.0, difference, exact});
    choice.reason +=
        "; " + name + " not used: differs from eager by " + format_number("%.2g", difference) + " (relative)";
    return {};
  }
  std::string onednn_refused;
  const std::shared_ptr<InferenceModel> onednn =
      xnnpack.form == XnnpackForm::runtime
          ? checked_onednn_at_batch1(eager, graph_ir, chosen, sample_shape, onednn_refused)
          : nullptr;
  if (onednn_refused.rfind("differs", 0) == 0)
    choice.reason += "; oneDNN runtime at batch 1 not used: " + onednn_refused;
  torch::NoGradGuard no_grad;
  const torch::Tensor single = torch::rand(batch_shape(1, sample_shape));  // [1, ...sample] in [0, 1)
  const Forward route = [&chosen, route_threads](const torch::Tensor& input) {
    const device::CallerOpenMpThreads scope(route_threads);
    return chosen->forward(input);
  };
  std::vector<Forward> sides{route, forward_of(xnnpack.model)};
  if (onednn) sides.push_back(forward_of(onednn));
  const std::vector<double> fastest = fastest_alternating_ms(sides, single);
  choice.batch1_xnnpack_ms = fastest[1];
  choice.batch1_xnnpack_form = xnnpack.form;
  choice.measured.push_back({Fp32Engine::xnnpack, fastest[1], 0.0, difference, exact});
  // A runtime uses one core: against a route on the pool it wins unless that is >= 10% faster (fewer joules
  // at about the same latency); against a route on one thread it has to be >= 10% faster itself.
  const auto beats_route = [&](double ms) {
    return route_threads > 1 ? fastest[0] > 0.9 * ms : ms <= 0.9 * fastest[0];
  };
  const std::string on_route = " ms on " + std::to_string(route_threads) + " thread(s)";
  if (onednn) {
    choice.batch1_onednn_ms = fastest[2];
    if (fastest[2] <= 0.9 * fastest[1] && beats_route(fastest[2])) {
      choice.reason += "; batch 1 on oneDNN runtime: " + format_number("%.3f", fastest[2]) +
                       " ms on the calling thread vs " + name + " " + format_number("%.3f", fastest[1]) +
                       " ms vs " + format_number("%.3f", fastest[0]) + on_route;
      return {onednn, Fp32Engine::onednn};
    }
  }
  const bool wins = beats_route(fastest[1]);
  std::string timing = format_number("%.3f", fastest[1]) + " ms on the calling thread vs " +
                       format_number("%.3f", fastest[0]) + on_route;
  if (onednn) timing += " (oneDNN runtime " + format_number("%.3f", fastest[2]) + " ms)";
  choice.reason += (wins ? "; batch 1 on " + name + ": " : "; " + name + " kept out: ") + timing;
  return wins ? Batch1Runtime{xnnpack.model, Fp32Engine::xnnpack} : Batch1Runtime{};
}

// Batch 1 after the engine choice: on one OpenMP thread where `batch1` measured that faster (pool 0: one
// usable CPU, nothing to choose), then on XNNPACK (or oneDNN) where it beats that route
// (faster_runtime_at_batch1).
std::shared_ptr<InferenceModel> with_batch1_route(
    const std::shared_ptr<InferenceModel>& eager, const GraphBuilder& build_graph,
    const GraphIrSource& graph_ir, std::shared_ptr<InferenceModel> chosen, const Batch1Threads& batch1,
    const std::vector<std::int64_t>& sample_shape, const RunOptions& run, Fp32EngineChoice& choice) {
  const bool one_thread = batch1.pool == 0 || batch1.threads == 1;
  const int route_threads = one_thread ? 1 : batch1.pool;
  double route_ms = one_thread ? batch1.one_thread_ms : batch1.pool_ms;
  if (batch1.pool > 0) {
    choice.batch1_threads = batch1.threads;
    choice.batch1_one_thread_ms = batch1.one_thread_ms;
    if (batch1.threads == 1) choice.reason += "; " + batch1.describe();
  } else {  // one CPU: the engine choice's own batch-1 time
    for (const EngineMeasurement& measured : choice.measured)
      if (measured.engine == choice.engine) route_ms = measured.batch1_ms;
  }
  const Batch1Runtime faster = faster_runtime_at_batch1(eager, build_graph, graph_ir, chosen, route_threads,
                                                        route_ms, sample_shape, choice);
  if (faster.model) {  // no OpenMP scope around it; only the checked shape goes there
    choice.batch1_engine = faster.engine;
    choice.batch1_threads = 1;
    return std::make_shared<EngineRoute>(*chosen, EngineRoute::Models{faster.model, chosen, chosen},
                                         sample_shape, false, true);
  }
  return one_thread && batch1.pool > 0 ? one_thread_at_batch1(chosen) : chosen;
}

// --fp32-engine xnnpack, checked: batch 1 on XNNPACK's runtime of the graph IR where it builds and agrees
// with eager (pixels and normal(0, 2) values), else on the XNNPACK operators' graph on the calling thread;
// larger batches on that graph (XNNPACK's pthreadpool), shapes other than the checked one on eager. Where the
// operators' graph differed from eager (`xnnpack` is eager then), the runtime still runs batch 1 when it
// agrees: it is ipj's own graph, not LibTorch's.
std::shared_ptr<InferenceModel> forced_xnnpack(const std::shared_ptr<InferenceModel>& eager,
                                               const std::shared_ptr<InferenceModel>& xnnpack,
                                               const GraphIrSource& graph_ir,
                                               const std::vector<std::int64_t>& sample_shape,
                                               Fp32EngineChoice& choice) {
  const bool operators = choice.engine == Fp32Engine::xnnpack;  // else eager: the operators' graph differed
  std::shared_ptr<InferenceModel> batch1 = std::make_shared<OnCallingThread>(xnnpack);
  choice.batch1_xnnpack_form = operators ? XnnpackForm::operators : XnnpackForm::none;
  if (graph_ir) {
    try {
      auto runtime = xnnpack_runtime_model(graph_ir(), 1, 1, batch1);
      const double difference =
          xnnpack_difference(*eager, *runtime, sample_shape,
                             fp32_difference(forward_of(eager), forward_of(runtime), sample_shape, 1));
      if (!(difference <= kFp32EngineTolerance))
        fail(ErrorCategory::unsupported, "it differs from eager by " + format_number("%.2g", difference));
      batch1 = runtime;
      choice.batch1_xnnpack_form = XnnpackForm::runtime;
      choice.batch1_engine = Fp32Engine::xnnpack;
      choice.reason += "; batch 1 on XNNPACK runtime (within " + format_number("%.2g", difference) + ")";
    } catch (const std::exception& error) {  // the operators' graph, checked already, runs batch 1
      choice.reason += std::string("; batch 1 on ") + (operators ? "XNNPACK operators" : "eager") +
                       " (no runtime: " + error_cause(error.what()) + ")";
    }
  }
  return std::make_shared<EngineRoute>(*xnnpack, EngineRoute::Models{batch1, xnnpack, eager}, sample_shape,
                                       false, true);
}

// Builds the graph --fp32-engine asks for (auto: frozen). A forced engine that cannot be built is an error
// that says what to run instead; auto keeps eager and says why.
std::shared_ptr<InferenceModel> built_graph(const GraphBuilder& build_graph, Fp32Engine requested,
                                            Fp32EngineChoice& choice) {
  const bool xnnpack = requested == Fp32Engine::xnnpack;
  try {
    return build_graph(xnnpack ? Freezing::xnnpack : Freezing::optimized_batch1);
  } catch (const std::exception& error) {  // ipj's own checks, or LibTorch's freeze/optimize passes
    const std::string cause = error_cause(error.what());
    if (requested == Fp32Engine::auto_select) {
      choice.reason = "eager: the frozen graph cannot be built (" + cause + ")";
      return nullptr;
    }
    fail(ErrorCategory::unsupported, std::string(xnnpack ? "--fp32-engine xnnpack: XNNPACK's"
                                                         : "--fp32-engine "
                                                           "frozen: the frozen") +
                                         " graph of this model cannot be built (" + cause +
                                         "); --fp32-engine auto or eager run it");
  }
}

// --fp32-engine onednn at batch 1 as well (`routed` runs the batch size the run times): oneDNN's runtime on
// the calling thread, checked as auto checks it; `base` (frozen or eager) answers calls that find it held,
// and `routed` inputs it should not take (other shapes, NaN, huge values). Where that runtime cannot run,
// batch 1 stays on `base` and the reason says why (the batch size still runs on oneDNN, as asked), unless
// batch 1 is the run's only size (`required`): ipj::Error(unsupported) then.
std::shared_ptr<InferenceModel> forced_onednn_at_batch1(const std::shared_ptr<InferenceModel>& eager,
                                                        const GraphIrSource& graph_ir,
                                                        const std::shared_ptr<InferenceModel>& base,
                                                        const std::shared_ptr<InferenceModel>& routed,
                                                        const std::vector<std::int64_t>& sample_shape,
                                                        bool required, Fp32EngineChoice& choice) {
  std::string refused;
  const auto runtime = checked_onednn_at_batch1(eager, graph_ir, base, sample_shape, refused);
  const std::string cannot = "oneDNN's runtime of this model at batch 1 cannot run (" + refused + ")";
  if (!runtime && required)
    fail(ErrorCategory::unsupported,
         "--fp32-engine onednn: " + cannot + "; --fp32-engine auto or frozen run it");
  if (!runtime) {
    choice.reason += "; batch 1 stays " + choice_name(choice.batch1_engine) + ": " + cannot;
    return routed;
  }
  choice.batch1_engine = Fp32Engine::onednn;
  choice.batch1_threads = 1;
  choice.reason += "; batch 1 on oneDNN's runtime on the calling thread (checked), as asked" +
                   onednn_winograd_note(*runtime);
  return std::make_shared<EngineRoute>(*routed, EngineRoute::Models{runtime, routed, routed}, sample_shape,
                                       false, true);
}

// --fp32-engine onednn: its batch size on oneDNN's runtime of the graph IR (with_forced_onednn) and batch 1
// on its one-thread runtime (forced_onednn_at_batch1), the other sizes on the frozen graph checked against
// eager, or eager where LibTorch cannot freeze the model. Needs the sample shape (ipj::Error(usage)).
std::shared_ptr<InferenceModel> forced_onednn_model(const std::shared_ptr<InferenceModel>& eager,
                                                    const GraphBuilder& build_graph,
                                                    const std::vector<std::int64_t>& sample_shape,
                                                    const RunOptions& run, const GraphIrSource& graph_ir) {
  if (sample_shape.empty())
    fail(ErrorCategory::usage,
         "--fp32-engine onednn needs the model's input shape: give --input-shape C,H,W (or F), which a "
         "TorchScript file does not record");
  try {  // a shape the model cannot take fails every runtime below; say so, not what each refuses
    torch::NoGradGuard no_grad;
    eager->forward(torch::rand(batch_shape(1, sample_shape)));
  } catch (const Error& error) {  // ipj's check of what the model answers (a tuple, complex values): no shape
    fail(error.category(), std::string("--fp32-engine onednn: ") + error.what());
  } catch (const std::exception& error) {
    fail(ErrorCategory::usage, "--fp32-engine onednn: the model fails on a random " +
                                   batch_shape_text(1, sample_shape) + " input (" +
                                   error_cause(error.what()) +
                                   "): is --input-shape the shape of one of the model's samples?");
  }
  Fp32EngineChoice choice;
  choice.reason = "eager for other batch sizes";
  std::shared_ptr<InferenceModel> frozen;
  try {
    frozen = build_graph(Freezing::optimized_batch1);
  } catch (const std::exception& error) {  // ipj's own checks, or LibTorch's freeze/optimize passes
    choice.reason += ": LibTorch cannot freeze this model (" + error_cause(error.what()) + ")";
  }
  if (frozen)
    choice = checked_choice(Fp32Engine::frozen, Fp32Engine::onednn, *eager, *frozen, sample_shape, run);
  choice.requested = Fp32Engine::onednn;
  choice.batch1_engine = choice.batch_engine = choice.engine;
  const std::shared_ptr<InferenceModel> base = choice.engine == Fp32Engine::frozen ? frozen : eager;
  const bool batch1_only = run.fp32_engine_batch <= 1;
  std::shared_ptr<InferenceModel> routed =
      batch1_only ? base : with_forced_onednn(eager, base, graph_ir, sample_shape, run, choice);
  routed = forced_onednn_at_batch1(eager, graph_ir, base, routed, sample_shape, batch1_only, choice);
  routed->fp32_engine = choice;
  return routed;
}

}  // namespace

double xnnpack_difference(const InferenceModel& eager, const InferenceModel& xnnpack,
                          const std::vector<std::int64_t>& sample_shape, double difference,
                          std::int64_t batch) {
  return std::max(difference,
                  fp32_wide_difference(forward_of(eager), forward_of(xnnpack), sample_shape, batch));
}

std::shared_ptr<InferenceModel> fp32_engine_model(std::shared_ptr<InferenceModel> eager,
                                                  const GraphBuilder& build_graph,
                                                  const std::vector<std::int64_t>& sample_shape,
                                                  const RunOptions& run,
                                                  const GraphIrSource& graph_ir_source) {
  if (run.fp32_engine == Fp32Engine::onednn)
    return forced_onednn_model(eager, build_graph, sample_shape, run, built_once(graph_ir_source));
  const GraphIrSource graph_ir = built_once(graph_ir_source);
  Fp32EngineChoice choice;
  choice.requested = run.fp32_engine;
  const std::shared_ptr<InferenceModel> graph =
      run.fp32_engine == Fp32Engine::eager ? nullptr : built_graph(build_graph, run.fp32_engine, choice);
  if (run.fp32_engine == Fp32Engine::eager) choice.reason = "eager, as asked";
  if (run.fp32_engine == Fp32Engine::frozen || run.fp32_engine == Fp32Engine::xnnpack)
    choice = checked_choice(run.fp32_engine, run.fp32_engine, *eager, *graph, sample_shape, run);
  if (graph && run.fp32_engine == Fp32Engine::auto_select)
    choice = timed_choice(eager, graph, sample_shape, run);
  std::shared_ptr<InferenceModel> chosen = choice.engine == Fp32Engine::eager ? eager : graph;
  choice.batch1_engine = choice.engine;
  if (run.fp32_engine == Fp32Engine::xnnpack)
    chosen = forced_xnnpack(eager, choice.engine == Fp32Engine::xnnpack ? graph : eager, graph_ir,
                            sample_shape, choice);
  choice.batch_engine = choice.engine;
  if (run.fp32_engine == Fp32Engine::auto_select || run.fp32_engine == Fp32Engine::xnnpack)
    chosen = with_batched_xnnpack(eager, chosen, graph_ir, sample_shape, run, choice);
  std::optional<Batch1Threads> batch1;
  if (run.fp32_engine == Fp32Engine::auto_select && !sample_shape.empty()) {
    try {
      batch1 = measure_batch1_threads(forward_of(chosen), sample_shape, run.pool_threads);
    } catch (const std::exception&) {  // as above: the engine choice already says why nothing was timed
    }
  }
  if (batch1) {
    chosen = with_batch1_route(eager, build_graph, graph_ir, chosen, *batch1, sample_shape, run, choice);
    chosen = with_batch1_xnnpack_pool(eager, chosen, graph_ir, sample_shape, run, choice);
    // batch1_threads tells the same story as fp32_engine (batch1_engine, batch1_xnnpack_ms)
    batch1->xnnpack = choice.batch1_engine == Fp32Engine::xnnpack;
    batch1->onednn = choice.batch1_engine == Fp32Engine::onednn;
    batch1->xnnpack_ms = choice.batch1_xnnpack_ms;
  }
  spdlog::debug("fp32 engine: {} ({})", choice_name(choice.engine), choice.reason);
  chosen->fp32_engine = choice;
  if (batch1 && batch1->pool > 0) chosen->batch1_threads = batch1;
  return chosen;
}

namespace {

// `candidate` when it builds, agrees with `model` (on the threads measured for it: candidate.disagreement)
// and is faster than that setting at batch 1; ties within 10% of the pool go to the candidate (one thread).
// Records what was timed in `measured`; else `model`.
InferenceModelPtr timed_batch1_candidate(const InferenceModelPtr& model, const Batch1Candidate& candidate,
                                         Batch1Threads& measured) {
  std::shared_ptr<InferenceModel> built;
  try {
    built = candidate.build(model, 1, 1);
  } catch (const std::exception& error) {
    spdlog::debug("{}: XNNPACK not used at batch 1 ({})", model->model_name, error_cause(error.what()));
    return model;
  }
  torch::NoGradGuard no_grad;
  const bool on_pool = measured.pool > 0 && measured.threads == 0;
  const Forward reference = [&model, threads = on_pool ? measured.pool : 1](const torch::Tensor& input) {
    const device::CallerOpenMpThreads scope(threads);
    return model->forward(input);
  };
  const Forward candidate_forward = [&built](const torch::Tensor& input) { return built->forward(input); };
  const std::string disagreement = candidate.disagreement(reference, candidate_forward);
  if (!disagreement.empty()) {
    spdlog::debug("{}: XNNPACK not used at batch 1 ({})", model->model_name, disagreement);
    return model;
  }
  const std::vector<double> fastest = fastest_alternating_ms(
      {reference, candidate_forward}, torch::rand(batch_shape(1, model->sample_shape)));
  if (measured.pool == 0) {  // one usable CPU: the reference ran on it
    measured.threads = 1;
    measured.one_thread_ms = fastest[0];
  }
  measured.xnnpack_ms = fastest[1];
  measured.xnnpack = fastest[1] < (on_pool ? 1.1 : 1.0) * fastest[0];
  return measured.xnnpack ? built : model;
}

}  // namespace

InferenceModelPtr with_measured_batch1_threads(InferenceModelPtr model, int pool_threads,
                                               const Batch1Candidate& candidate) {
  if (model->sample_shape.empty()) return model;
  Batch1Threads measured;
  try {
    measured = measure_batch1_threads([&model](const torch::Tensor& input) { return model->forward(input); },
                                      model->sample_shape, pool_threads);
  } catch (const std::exception& error) {  // the model fails on a random batch: later calls will say why
    spdlog::debug("batch-1 threads not measured: {}", error_cause(error.what()));
    return model;
  }
  const InferenceModelPtr batch1 =
      candidate.build ? timed_batch1_candidate(model, candidate, measured) : model;
  if (measured.pool == 0 && measured.xnnpack_ms == 0.0) return model;
  // XNNPACK at batch 1 (its fused clamps turn NaN into numbers: such inputs go to `model`), else `model` on
  // the threads measured
  auto result = std::make_shared<EngineRoute>(
      *model, EngineRoute::Models{batch1, model, model},
      measured.xnnpack ? model->sample_shape : std::vector<std::int64_t>{},
      /*one_thread=*/!measured.xnnpack && measured.threads == 1, /*tame_batch1=*/measured.xnnpack);
  result->batch1_threads = measured;
  if (measured.threads == 1 || measured.xnnpack)
    spdlog::debug("{} {}: {}", model->model_name, choice_name(model->variant), measured.describe());
  return result;
}

std::shared_ptr<InferenceModel> jit_model(std::shared_ptr<InferenceModel> eager,
                                          const GraphBuilder& build_graph,
                                          const std::vector<std::int64_t>& sample_shape,
                                          const RunOptions& run) {
  RunOptions frozen = run;
  frozen.fp32_engine = Fp32Engine::frozen;
  return fp32_engine_model(std::move(eager), build_graph, sample_shape, frozen);
}

}  // namespace ipj::infer
