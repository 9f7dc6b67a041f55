// Private to the infer module: InferenceModels over graph IR (ipj's ResNets, graph files, imported
// TorchScript files): float (fp32, bf16 autocast), int8 made on the fly, and int8 graph files; the
// TorchScript model class and the fp32 engine step that every format shares.
#pragma once

#include <torch/script.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ipj/infer/inference_model.hpp"
#include "ipj/infer/script_program.hpp"
#include "ipj/infer/xnnpack_runtime.hpp"
#include "ipj/quant/graph.hpp"

namespace ipj::infer {

// A TorchScript module as an InferenceModel: input [B, ...] -> reshape to [B, ...reshape] (when given) ->
// (x - mean) / std (when given: quant::normalize_by_dim1's rule) -> forward under `precision` autocast ->
// float output.
class ScriptModel : public InferenceModel {
 public:
  ScriptModel(torch::jit::Module module, std::vector<float> mean, std::vector<float> std,
              std::string precision, std::vector<std::int64_t> reshape);
  torch::Tensor forward(const torch::Tensor& input) const override;

 private:
  torch::jit::Module module_;
  std::vector<float> mean_, std_;
  std::string precision_;
  std::vector<std::int64_t> reshape_;
};

// The model as TorchScript frozen the given way (Freezing::optimized_batch1: the frozen engine;
// Freezing::xnnpack: XNNPACK's graph). Throws when that graph cannot be built.
using GraphBuilder = std::function<std::shared_ptr<InferenceModel>(Freezing)>;
// The model as ipj's graph IR on raw inputs (for XNNPACK's runtime); throws where it cannot be expressed.
// Empty: the source has none.
using GraphIrSource = std::function<quant::Graph()>;

// `source` run once, on first use, for every XNNPACK runtime the engine choice builds (batch 1, its pool, the
// timed batch): a TorchScript file is imported once (and says once what its graph leaves out); a failure is
// kept and thrown again. The graph (its tensors shared, not copied) lives as long as the returned source.
GraphIrSource built_once(GraphIrSource source);

// `cause` where the engine choice's `reason` does not say it yet, else "the same as above": one failure (the
// graph importer's refusal, a node no runtime takes) is met by every runtime the choice tries, and said once.
std::string cause_once(const std::string& reason, const std::string& cause);

// The fp32 variant as run.fp32_engine says: `eager`, the graph `build_graph` makes (frozen or xnnpack,
// checked once against eager), or (auto) the faster exact one of eager and frozen timed on
// [B, ...sample_shape] inputs, then batch-1 inputs on one OpenMP thread and/or on XNNPACK (the runtime of
// `graph_ir`, else LibTorch's XNNPACK graph) where those timed >= 10% faster; the result's fp32_engine says
// which and why. A graph that cannot be built falls back to eager (auto) or throws (asked for). Callers set
// parameter_bytes and the description afterwards.
std::shared_ptr<InferenceModel> fp32_engine_model(std::shared_ptr<InferenceModel> eager,
                                                  const GraphBuilder& build_graph,
                                                  const std::vector<std::int64_t>& sample_shape,
                                                  const RunOptions& run, const GraphIrSource& graph_ir = {});

// The largest difference from eager of an XNNPACK model: the pixel `difference` the caller measured, and
// [batch, ...sample_shape] normal(0, 2) values (a fused clamp turns an internal NaN into a number; a graph
// pass may move an in-place clamp of the input). Throws what either forward throws on those values.
double xnnpack_difference(const InferenceModel& eager, const InferenceModel& xnnpack,
                          const std::vector<std::int64_t>& sample_shape, double difference,
                          std::int64_t batch = 1);

// Inputs of exactly choice.batch (> 1) on XNNPACK's runtime of `graph_ir` (a pthreadpool of the run's
// threads, on `chosen` while another call holds it) where it is exact against `eager` (pixels and normal(0,
// 2) values) and, for auto, timed >= 10% faster than `chosen` on the same threads (--fp32-engine xnnpack:
// once checked): returns that route (xnnpack_batch_route: auto pads partial batches from
// choice.batch_xnnpack_min_rows and races the two engines call by call), else `chosen`. Such inputs holding a
// NaN, an infinity or a huge value run on `chosen` (auto) or `eager` (forced). Records choice.batch_engine /
// batch_xnnpack_ms / batch_xnnpack_threads / batch_xnnpack_min_rows and says why in its reason.
std::shared_ptr<InferenceModel> with_batched_xnnpack(const std::shared_ptr<InferenceModel>& eager,
                                                     std::shared_ptr<InferenceModel> chosen,
                                                     const GraphIrSource& graph_ir,
                                                     const std::vector<std::int64_t>& sample_shape,
                                                     const RunOptions& run, Fp32EngineChoice& choice);

// --fp32-engine onednn: inputs of exactly run.fp32_engine_batch rows on oneDNN's runtime of `graph_ir`
// (checked against `eager` once; NaN/huge inputs on `eager`), everything else on `chosen` (the frozen graph).
// Throws ipj::Error(unsupported) where that runtime cannot be built or differs. `sample_shape` known (the
// caller refuses a model without one).
std::shared_ptr<InferenceModel> with_forced_onednn(const std::shared_ptr<InferenceModel>& eager,
                                                   std::shared_ptr<InferenceModel> chosen,
                                                   const GraphIrSource& graph_ir,
                                                   const std::vector<std::int64_t>& sample_shape,
                                                   const RunOptions& run, Fp32EngineChoice& choice);

// `model` called with `threads` OpenMP threads on the calling thread (LibTorch's kernels; XNNPACK's runtimes
// have their own pool).
Forward forward_on(const std::shared_ptr<const InferenceModel>& model, int threads);
// The threads of the pool as the run sets it later (--threads, else every CPU the process may use).
int run_pool_threads(const RunOptions& run);

// The runtimes a batch route can send its batch size to.
enum class BatchRuntimeForm {
  xnnpack_pool,   // one XNNPACK runtime on a pthreadpool
  xnnpack_split,  // the batch's rows split across one-thread XNNPACK runtimes
  onednn,         // oneDNN's primitives on the calling thread's OpenMP threads
};

// A batch route's plan as its runtimes for a shrunk thread plan's fewer threads need it.
struct FewerThreadsPlan {
  BatchRuntimeForm form = BatchRuntimeForm::xnnpack_pool;  // the plan's runtime
  std::int64_t batch = 1;                                  // the runtime's batch size
  int threads = 1;                                         // the plan's
  double runtime_ms = 0.0;      // its runtime's load-time ms per batch on them (0: not timed)
  bool only_plan_form = false;  // --fp32-engine xnnpack: XNNPACK's pool only
};
// What builds a route's runtime on a shrunk plan's fewer threads (RunOptions::replanned_threads), checked
// against `eager` as the plan's was: of the plan's form where it runs on them, else (a row split on one
// thread) oneDNN's or XNNPACK's on a pool; where a batch on them is cheap to time (plan.runtime_ms x
// plan.threads / threads <= 50 ms) every form that builds, the fastest timed alternating on those threads.
// The runtime's name and note say which and why where it is not the plan's form.
BatchRouteModels::RuntimeBuilder fewer_threads_builder(const std::shared_ptr<InferenceModel>& eager,
                                                       const GraphIrSource& graph_ir,
                                                       const std::vector<std::int64_t>& sample_shape,
                                                       const FewerThreadsPlan& plan);

// Whether a batch route also times the batch's rows split across `threads` one-thread runtimes: two or more
// threads and at least two rows per thread.
bool row_split_worth_timing(std::int64_t batch, int threads);
// "; one runtime on a pool of T P ms, its rows split across T one-thread runtimes S ms": both forms' load
// timings, for a route's reason.
std::string row_split_timings(int threads, double pool_ms, double split_ms);

// Whether batch 1 runs on XNNPACK's pool timed `pool_ms` against the calling thread's `thread_ms`, the pool
// at `cpu_ratio` x the calling thread's CPU per call (0: not measured): >= kBatch1PoolMinSpeedup faster and,
// preferring joules, at a measured ratio <= kBatch1PoolMaxCpuRatio.
bool batch1_pool_wins(double thread_ms, double pool_ms, double cpu_ratio, Preference prefer);

// Where `chosen` runs batch 1 on XNNPACK's runtime on the calling thread (choice.batch1_engine xnnpack,
// form runtime) and the run has >= 2 threads: the same runtime on a pthreadpool of the run's threads,
// checked against `eager` and timed against `chosen` at batch 1; >= kBatch1PoolMinSpeedup faster at <=
// kBatch1PoolMaxCpuRatio the process CPU per call (back to back): a route that runs batch-1
// calls starting within kBatch1PoolGapMs of the previous call's end there (back to back: a bench, a busy
// server), raced call by call against `chosen` (a core taken by a neighbour: the pool waits for it and
// loses), sparse calls on `chosen` (waking an idle core's worker costs more CPU than the call). Else
// `chosen`. Records choice.batch1_pool_ms / batch1_pool_threads and says why in its reason.
std::shared_ptr<InferenceModel> with_batch1_xnnpack_pool(const std::shared_ptr<InferenceModel>& eager,
                                                         std::shared_ptr<InferenceModel> chosen,
                                                         const GraphIrSource& graph_ir,
                                                         const std::vector<std::int64_t>& sample_shape,
                                                         const RunOptions& run, Fp32EngineChoice& choice);

// The jit variant: the frozen graph `build_graph` makes, checked once against `eager` on a random batch of
// `sample_shape` (eager runs instead, with a warning, if they differ); fp32_engine says which runs and why.
std::shared_ptr<InferenceModel> jit_model(std::shared_ptr<InferenceModel> eager,
                                          const GraphBuilder& build_graph,
                                          const std::vector<std::int64_t>& sample_shape,
                                          const RunOptions& run);

// The graph IR as TorchScript frozen the given way (script_graph), as an InferenceModel on raw inputs.
std::shared_ptr<InferenceModel> script_graph_model(const quant::Graph& graph, Freezing freezing);

// [batch, ...sample_shape]: the shape of a batch of `batch` samples.
std::vector<std::int64_t> batch_shape(std::int64_t batch, const std::vector<std::int64_t>& sample_shape);

// With a `candidate` (XNNPACK's int8 runtime of a static int8 program) that is also timed at batch 1 against
// the setting measured, and runs batch 1 when it agrees and is faster (Batch1Threads::xnnpack).
struct Batch1Candidate {
  // Builds the candidate for [batch, ...sample_shape] inputs on `threads` (1: the calling thread), answering
  // on `busy` while another call holds it; throws ipj::Error(unsupported) when it cannot. Empty: no
  // candidate.
  std::function<std::shared_ptr<InferenceModel>(InferenceModelPtr busy, std::int64_t batch, int threads)>
      build;
  // "" when the candidate answers close enough to the model (each a batch-1 forward), else why not.
  std::function<std::string(const Forward& model, const Forward& candidate)> disagreement;
};
// XNNPACK's int8 runtime of an int8 graph model (a static or QAT QuantizedGraph behind `model`), accepted
// when on 16 batch-1 pixel inputs (fixed) it is no further from the graph with its int8 weights in float than
// LibTorch's int8 kernels are (mean |difference| per logit, x 1.25): the two round activations differently,
// which untrained or deep nets amplify. None
// for other models, dynamic int8 or an engine asked for by name.
Batch1Candidate xnnpack_int8_graph_candidate(const InferenceModel& model, const RunOptions& run);
// `model`, timed at batch 1 on the pool of `pool_threads` (0: the CPUs available) and on one thread
// (measure_batch1_threads) when its sample shape is known; the result records it in batch1_threads and runs
// batch-1 inputs on one thread when that won. The model as given when nothing could be measured (no shape,
// one usable CPU, a model that fails on a random batch).
InferenceModelPtr with_measured_batch1_threads(InferenceModelPtr model, int pool_threads,
                                               const Batch1Candidate& candidate = {});
// `routed` (`int8` with its batch-1 route) with batches of run.fp32_engine_batch (> 1, where a row runs that
// size: run.batched_xnnpack) on the `candidate`'s XNNPACK int8 runtime built for that batch on a pthreadpool
// of the run's threads, where it passes the candidate's check (on the last row of a full batch) and times
// >= 10% faster than `int8` on the same threads (Int8BatchEngine); raced call by call, smaller batches
// padded to it where that still wins. Always records int8_batch_engine (what was timed, or why not) unless
// there is no candidate (dynamic int8, an engine asked for by name) or no sample shape.
InferenceModelPtr with_batched_int8_xnnpack(InferenceModelPtr routed, const InferenceModelPtr& int8,
                                            const Batch1Candidate& candidate, const RunOptions& run);

// fp32 | bf16 | int8-dynamic | int8-static (calibrated on options.calibration_samples images of
// options.calibration_data, else `data_dir`, else the default data set). Throws ipj::Error(unsupported) for
// other variants. Sets parameter_bytes; the caller fills the rest.
// data_options: how the model's data set is read (image folders: resize, channels), merged with
// options.calibration_data_options.
std::shared_ptr<InferenceModel> graph_variant(quant::Graph graph, Variant variant,
                                              const std::string& data_dir,
                                              const data::DataOptions& data_options,
                                              const LoadOptions& options);
// An int8 file runs only as the variant it stores (or Variant::file): ipj::Error(unsupported) otherwise.
void require_stored_variant(Variant requested, Variant stored, const std::string& path);

// An `ipj quantize` int8 graph file, runnable as its stored variant (or "file").
std::shared_ptr<InferenceModel> int8_graph_model(const std::string& path, const LoadOptions& options);

}  // namespace ipj::infer
