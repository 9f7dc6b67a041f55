// ipj's graph IR run as one XNNPACK subgraph runtime (one plan made at load, weights packed once, its own
// buffers, no TorchScript interpreter between operators): the fp32 variant's batch-1 engine, and a static
// int8 program's. Limits: one batch size per runtime; what the IR has in NHWC (conv2d, linear, add, clamp,
// pools, flatten before linear layers); built only where Debian's libxnnpack-dev was found
// (IPJ_WITH_XNNPACK).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ipj/infer/inference_model.hpp"
#include "ipj/quant/graph.hpp"
#include "ipj/quant/quantized_graph.hpp"
#include "ipj/quant/quantized_program.hpp"

namespace ipj::infer {

// Whether this build has XNNPACK's subgraph API (compiled with its headers) and it initialised on this CPU.
bool xnnpack_runtime_available();

// What a pool's workers do after a call: `sleep` at once (no CPU while idle; the next call wakes them), or
// `spin` first (pthreadpool's loop of a million pauses: milliseconds of a core after every call, for no
// wake-up on the next). bench/xnnpack_threads.sh measures both.
enum class XnnpackIdle { sleep, spin };

// `graph` as an XNNPACK runtime for [batch, ...graph.input_shape] inputs (the graph's normalisation and input
// padding applied in ATen first). threads 1: the calling thread runs it; >= 2: a pthreadpool of that many
// whose workers do `idle` between calls. Throws ipj::Error(unsupported) naming the first node the subgraph
// cannot take (an operator XNNPACK lacks, a flatten read by something else than linear layers) or why
// XNNPACK is missing. forward() refuses other shapes (ipj::Error(invalid_input)); concurrent calls run one at
// a time on the runtime, or on `busy` (when given) while another call holds it.
std::shared_ptr<InferenceModel> xnnpack_runtime_model(const quant::Graph& graph, std::int64_t batch,
                                                      int threads,
                                                      std::shared_ptr<const InferenceModel> busy = nullptr,
                                                      XnnpackIdle idle = XnnpackIdle::sleep);

// A static or QAT int8 program as an XNNPACK runtime in signed 8 bits, for [batch, ...input_shape] pixels, on
// the calling thread (threads 1) or a pthreadpool of `threads` whose workers sleep between calls: the same
// quantized values as QuantizedProgram::forward up to requantization rounding (XNNPACK rounds biases to int32
// at input x weight scale and applies its own rounding; where ipj's oneDNN/FBGEMM kernels need 7-bit weights
// XNNPACK runs the stored 8 bits). Throws ipj::Error(unsupported) for dynamic int8 or a layer XNNPACK refuses
// (naming it); the caller checks the result against QuantizedProgram::forward before use. Concurrency as
// xnnpack_runtime_model's.
std::shared_ptr<InferenceModel> xnnpack_int8_runtime_model(
    const quant::QuantizedProgram& int8, std::int64_t batch,
    std::shared_ptr<const InferenceModel> busy = nullptr, int threads = 1);

// The same for a static or QAT int8 graph (any architecture the importer takes): QuantizedGraph::forward's
// values up to requantization rounding (adds, pools and clamps round on their own too), float logits as it
// computes them. Refuses (ipj::Error(unsupported), naming the node) average pools with windows, dynamic
// int8, and what XNNPACK refuses.
std::shared_ptr<InferenceModel> xnnpack_int8_graph_runtime_model(
    const quant::QuantizedGraph& int8, std::int64_t batch,
    std::shared_ptr<const InferenceModel> busy = nullptr, int threads = 1);

// `batch` rows split into `parts` slices (row_split_sizes), each on its own one-thread runtime that
// build(rows) makes, the slices run at once on a pthreadpool of `parts` threads (the caller takes one, the
// workers sleep after each call): one hand-off per call where a runtime on a pool of `parts` waits for its
// workers at every operator (the mlp's int8 batch of 64 at load on Turin-BF16: 0.18-0.24 ms split in two vs
// 0.26-0.33 ms on a pool of 2; two one-thread copies of a layer run 1.87x one, bench/python/vcpu_pairing.py).
// The answer: the slices' answers in order,
// counted as one XNNPACK call. Throws ipj::Error(invalid_input) for parts < 2 or batch < parts, what build
// throws, and ipj::Error(unsupported) without XNNPACK. Concurrency as xnnpack_runtime_model's.
using RowRuntimeBuilder = std::function<std::shared_ptr<InferenceModel>(std::int64_t rows)>;
std::shared_ptr<InferenceModel> xnnpack_row_split_model(const RowRuntimeBuilder& build, std::int64_t batch,
                                                        int parts,
                                                        std::shared_ptr<const InferenceModel> busy = nullptr);
// The slices' rows: `parts` sizes differing by at most one, the larger first, summing to `batch`; empty for
// parts < 1 or batch < parts.
std::vector<std::int64_t> row_split_sizes(std::int64_t batch, int parts);

// How many forward calls XNNPACK runtimes (any of the above, any model) have answered in this process so
// far: what `ipj bench` counts per row, and how a test sees which engine a route sent a call to. Calls a
// runtime passed to its `busy` model are not counted, nor calls made on a thread while an
// UncountedRuntimeCalls lives there; always 0 in a build without XNNPACK.
std::uint64_t xnnpack_runtime_calls();

// While one lives on a thread, the runtime calls that thread makes (XNNPACK's and oneDNN's) are left out of
// xnnpack_runtime_calls() and onednn_runtime_calls(): a model's load-time timings and checks
// (load_inference_model, a route building a runtime for fewer threads), a server's warm-up. The counts are
// then the calls that answered requests and bench rows. Nests.
class UncountedRuntimeCalls {
 public:
  UncountedRuntimeCalls();
  ~UncountedRuntimeCalls();
  UncountedRuntimeCalls(const UncountedRuntimeCalls&) = delete;
  UncountedRuntimeCalls& operator=(const UncountedRuntimeCalls&) = delete;
};
// false while an UncountedRuntimeCalls lives on the calling thread.
bool runtime_calls_counted_on_this_thread();

// XNNPACK's fused clamps turn a NaN into a number, and float inside it may overflow where eager's does not:
// inputs with a larger magnitude (or a NaN) never reach an XNNPACK runtime that serves a route.
inline constexpr float kLargestXnnpackInput = 1e15f;
// Whether every value of `input` is a number of magnitude <= kLargestXnnpackInput: a plain loop over a
// contiguous float CPU tensor (ATen's reduction, a few operators, costs more than it at batch 1), else ATen's
// abs().max(); true for an empty tensor.
bool tame_for_xnnpack(const torch::Tensor& input);

// How a batch size runs on an XNNPACK runtime beside the engine chosen for everything else.
struct BatchRouteModels {
  std::shared_ptr<const InferenceModel> chosen;    // every other input
  std::shared_ptr<const InferenceModel> xnnpack;   // a runtime built for batch_shape
  std::shared_ptr<const InferenceModel> fallback;  // batch_shape inputs XNNPACK would tame (NaN, huge)
  // What a RuntimeBuilder built for fewer threads: the runtime (null: none, `note` says why), and where it
  // is not of the plan's runtime's form (a row split needs two threads), its name and how it was chosen.
  struct FewerThreadsRuntime {
    std::shared_ptr<const InferenceModel> runtime;
    std::string name;  // "": BatchRoutePlan::runtime_name
    std::string note;  // why none was built, or how this one was chosen ("" where it is the plan's form)
  };
  // The runtime for batch_shape on a pool of fewer threads than the plan's (checked against the model like
  // `xnnpack`); `cancelled` turns true when the route is being destroyed (a server stopping): the builder
  // should give up at its next step. Empty: calls on fewer threads run `chosen`.
  using RuntimeBuilder = std::function<FewerThreadsRuntime(int threads, const std::atomic<bool>& cancelled)>;
  RuntimeBuilder xnnpack_for_fewer_threads = {};
};

// How many runtimes for fewer threads a route builds at most (one per thread count a shrunk plan gave).
inline constexpr int kMaxFewerThreadRuntimes = 3;

// A raced route (below) probes the engine behind this long after a switch, doubling while it stays behind,
// up to the longest.
inline constexpr double kEngineProbeFirstS = 1.0;
inline constexpr double kEngineProbeLongestS = 32.0;

// Where a route sends inputs to its XNNPACK runtime.
struct BatchRoutePlan {
  std::vector<std::int64_t> batch_shape;  // [batch, ...sample]: the runtime's input
  int threads = 1;                        // the runtime's pool
  std::int64_t min_rows = 0;              // the fewest rows padded to `batch` (>= batch: no padding)
  // Load-time ms per full batch of the chosen engine and of the runtime (0: no race, XNNPACK runs them all)
  double chosen_ms = 0.0, xnnpack_ms = 0.0;
  // > 0: only calls that start within this many ms of the route's previous call's end may run on the
  // runtime (and count in the race); calls further apart run `chosen`. For batch 1 on a pool: waking a
  // worker whose core went idle costs more CPU than the call (kBatch1PoolGapMs).
  double max_gap_ms = 0.0;
  // Only calls that start while no other call of the route runs reach the runtime, and only calls that no
  // other overlapped count in the race (batch 1 on a pool: concurrent requests, a served model's instances,
  // are better on one core each, and their pace is the route's own concurrency, not the engine's).
  bool alone_only = false;
  std::string runtime_name = "XNNPACK's runtime";  // what the logs call the runtime ("oneDNN's runtime")
};

// The gap for batch 1 on XNNPACK's pool: measured on EPYC-BF16 (12-05) with ResNet-18 at 1x28x28 (a pool
// of 2 whose worker sleeps after each call vs the calling thread, bench/xnnpack_threads.sh): calls up to
// 0.5 ms apart cost 1.0-1.17x the calling thread's CPU per call at 1.7x its speed, 1 ms apart 0.9-1.3x,
// 2 ms 1.3-2.0x, 5 ms 1.6-2.8x.
inline constexpr double kBatch1PoolGapMs = 0.5;
// What the pool must buy at load to run batch 1: this speed-up over the calling thread, for at most this
// process CPU per call over the calling thread's (joules; ResNet-18 at 1x28x28 measured 1.07-1.13x, the test
// cnn 1.25-1.33x and MobileNetV2 1.45x on EPYC-BF16 (12-05)).
inline constexpr double kBatch1PoolMinSpeedup = 1.25;
inline constexpr double kBatch1PoolMaxCpuRatio = 1.2;

// The fewest rows of a batch worth padding with zero rows to `batch` on a runtime timed `xnnpack_ms` per full
// batch against the chosen engine's `chosen_ms` (its time taken as proportional to the rows, an underestimate
// where it has a fixed cost per call), XNNPACK by the same 10% margin: in [2, batch]; `batch` where it does
// not win (or batch <= 2, or no timing).
std::int64_t padded_min_rows(std::int64_t batch, double chosen_ms, double xnnpack_ms);

// Float inputs of plan.batch_shape, and those of plan.min_rows..batch-1 rows padded with zero rows (the
// answer's first rows returned), while the run's plan gives at least plan.threads to the caller's OpenMP pool
// or to OpenBLAS (a plan shrunk for a busy machine runs `chosen`, which follows it: a pool of two would wait
// for the busy core; with models.xnnpack_for_fewer_threads, the first such call starts building a runtime for
// the threads it has, on a thread of the route's own, and once it is built calls on that many threads race it
// against `chosen` as below, its race seeded and its fewest padded rows set by timing both on those threads
// where the chosen engine's batch takes <= 50 ms on them, else from the plan's timings x plan.threads /
// threads and its rows), unless they hold a NaN or a magnitude above kLargestXnnpackInput (those on
// `fallback`), run on models.xnnpack or, raced call by call (the plan's load-time timings as the start),
// `chosen`: the one whose recent calls (the last 50 ms, at least three) cost less per full batch (median),
// the other probed (three calls: a warm-up, then the slower of two counts) at 1, 2, 4 ... 32 s and when the
// one ahead turns slower than the other's history, and taking over only on a probe (a fixed thread plan on a
// machine that got busy: XNNPACK's pool waits on every operator for the cores other work holds, and loses
// after a few calls; a slowdown both share switches nothing: engine_race.hpp); a switch is logged. Calls made
// while another holds the runtime (instances of a served model), with plan.max_gap_ms those further apart
// than that from the previous call, and with plan.alone_only those that start while another call runs, run on
// `chosen`; everything else too. Describes itself as `chosen`.
std::shared_ptr<InferenceModel> xnnpack_batch_route(BatchRouteModels models, BatchRoutePlan plan);

}  // namespace ipj::infer
