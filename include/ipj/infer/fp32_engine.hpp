// How the fp32 variant runs: eager LibTorch (the model as written) or a frozen graph (weights constant, BN
// folded into convolutions, oneDNN layouts, batch-1 linear layers as matrix-vector products), picked per
// model by timing both on random inputs and checking that they agree; batch-1 inputs may run on one thread
// or on XNNPACK (xnnpack_runtime.hpp, else its prepacked operators) where that timed faster, and the second
// batch size timed on XNNPACK's runtime on the run's threads where that timed faster. Measured at load.
#pragma once

#include <torch/types.h>

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ipj/core/choice.hpp"
#include "ipj/core/json_io.hpp"

namespace torch::jit {
struct Module;
}

namespace ipj::infer {

enum class Fp32Engine {
  auto_select,  // measure eager and frozen, run the faster of those that agree with eager
  eager,
  frozen,
  xnnpack,  // XNNPACK: batch 1 and the timed batch size on its runtime of the graph IR where that builds,
            // else (and other larger batches) on optimizeForMobile's graph (XNNPACK convolutions/linear
            // layers through the interpreter: fast at batch 1, slow at 64)
  onednn,   // the frozen graph, and batch 1 and the timed batch size on oneDNN's runtime of the graph IR
            // (onednn_runtime.hpp); auto times it at both sizes beside XNNPACK's
};

// What an engine choice that trades one for the other weighs: `joules` (the default: a faster form that costs
// more CPU per answer must stay within a bound of it, e.g. batch 1 on XNNPACK's pool) or `latency` (the
// fastest exact form, whatever CPU it spends).
enum class Preference { joules, latency };

// How XNNPACK runs batch 1 where it does: `runtime`, ipj's graph IR as one XNNPACK subgraph (one plan made at
// load, no interpreter between operators), or `operators`, LibTorch's optimizeForMobile graph (XNNPACK's
// prepacked convolutions and linear layers called from the TorchScript interpreter: models the graph IR does
// not take). `none`: XNNPACK does not run batch 1.
enum class XnnpackForm { none, runtime, operators };

// One engine as measured: median milliseconds per forward at batch 1 and at the second batch size, and how
// far its outputs are from eager's (max |difference| / max(1, max |eager|)).
struct EngineMeasurement {
  Fp32Engine engine = Fp32Engine::eager;
  double batch1_ms = 0.0;
  double batch_ms = 0.0;
  double max_difference = 0.0;
  bool exact = true;  // max_difference <= kFp32EngineTolerance
};

struct Fp32EngineChoice {
  Fp32Engine requested = Fp32Engine::auto_select;
  Fp32Engine engine = Fp32Engine::eager;    // the one that runs
  std::int64_t batch = 0;                   // the second batch size measured (0: not measured)
  std::vector<EngineMeasurement> measured;  // empty unless measured
  std::string reason;                       // why this engine, in words
  // Threads of the caller's OpenMP pool for batch-1 inputs: 1 unless every core ran the chosen engine >= 10%
  // faster at batch 1 than one thread (small models: waking the pool costs more than it saves, and within 10%
  // the extra cores cost more joules than the latency they buy), else 0 (the pool as the run sets it).
  int batch1_threads = 0;
  double batch1_one_thread_ms = 0.0;  // the chosen engine at batch 1 on one thread (0: not measured)
  // What runs batch-1 inputs: `engine`, or xnnpack (one core) when its graph was exact and timed faster at
  // batch 1 than `engine` on the threads chosen above (>= 10% faster than one thread; against the pool,
  // unless the pool was >= 10% faster); batch1_xnnpack_ms 0: XNNPACK not timed. onednn: oneDNN's runtime of
  // the graph IR on the calling thread, timed beside an exact XNNPACK runtime and >= 10% faster than it (and
  // than `engine` by the same rule), or asked for (--fp32-engine onednn, checked); batch1_onednn_ms 0: not
  // timed.
  Fp32Engine batch1_engine = Fp32Engine::eager;
  double batch1_xnnpack_ms = 0.0;
  double batch1_onednn_ms = 0.0;
  XnnpackForm batch1_xnnpack_form = XnnpackForm::none;  // which XNNPACK was timed (none: not timed)
  // Where batch 1 runs on XNNPACK's runtime on the calling thread: the same runtime on a pthreadpool of the
  // run's threads, timed against it (0: not timed); batch1_pool_threads > 0 when batch-1 calls that come
  // back to back (within kBatch1PoolGapMs of the previous call) run there, raced against the calling thread
  // (it was exact, >= 1.25x faster and at most 1.2x the CPU per call back to back: batch1_pool_cpu_ratio,
  // 0: not measured).
  // With Preference::latency the CPU per call is measured and reported but not weighed.
  double batch1_pool_ms = 0.0;
  double batch1_pool_cpu_ratio = 0.0;
  int batch1_pool_threads = 0;
  Preference prefer = Preference::joules;  // RunOptions::prefer, as the choice weighed it
  // What runs inputs of exactly `batch` (> 1): `engine`, or xnnpack (the graph IR as one XNNPACK runtime on a
  // pthreadpool of batch_xnnpack_threads, the run's pool) when it was exact at that size and timed >= 10%
  // faster than `engine` on the same threads; it runs only while the run's plan gives ATen's pool or OpenBLAS
  // that many threads (a plan shrunk for a busy machine runs `engine`). batch_xnnpack_ms 0: not timed.
  // Batches of batch_xnnpack_min_rows..batch-1 rows (a server's partial batches) run there too, padded with
  // zero rows, where that timed faster with the chosen engine's time taken as proportional to the rows
  // (= batch: no padding; 0: XNNPACK does not run). batch_xnnpack_row_parts > 0: the batch's rows split
  // across that many one-thread runtimes (xnnpack_row_split_model), which timed faster than one runtime on
  // the pool.
  // batch_engine onednn: oneDNN's runtime of the graph IR (onednn_runtime.hpp) on the calling thread's OpenMP
  // threads runs them instead (the route as XNNPACK's: it timed fastest of the runtimes, >= 10% faster than
  // `engine`); batch_onednn_ms: its time (0: not timed).
  Fp32Engine batch_engine = Fp32Engine::eager;
  double batch_xnnpack_ms = 0.0;
  double batch_onednn_ms = 0.0;
  int batch_xnnpack_threads = 0;
  std::int64_t batch_xnnpack_min_rows = 0;
  int batch_xnnpack_row_parts = 0;
};

// The largest relative difference from eager that still counts as the same fp32 model (rounding of folded
// batch norms and reordered sums; the graph importer's check uses the same bound).
inline constexpr double kFp32EngineTolerance = 1e-3;

Json to_json(const Fp32EngineChoice& choice);

using Forward = std::function<torch::Tensor(const torch::Tensor&)>;

// The fastest call of each forward on `input`, in ms, taking them in turn: 9 rounds, or from the third on
// until about half a second is spent; each turn is two calls, the second timed (the first brings the
// forward's weights back into cache after the other's). The fastest, not the median: a neighbour taking a
// core for a few calls must not decide; a setting that has to wait for a busy core is slow in every call.
std::vector<double> fastest_alternating_ms(const std::vector<Forward>& forwards, const torch::Tensor& input);

// How long the process rests before each block of cpu_ms_per_call: a pthreadpool's workers (XNNPACK's) spin
// about 20 ms after their last task (measured 12-07: 20.2-20.5 ms of process CPU over a 20-100 ms sleep after
// one call on a pool of 2), CPU that the next block would otherwise count as its own.
constexpr double kPoolSpinSettleMs = 30.0;
// Process CPU ms per call of each forward on `input`, back to back: five rounds of blocks taking them in turn
// (a rest of kPoolSpinSettleMs, a warm-up call, then `calls` counted), about 20 ms of calls per block for the
// fastest (`fastest_ms`); each side's cheapest block counts (like the fastest call for latency: other work in
// the process only adds CPU). A side's workers spinning between its own back-to-back calls count as its CPU.
std::vector<double> cpu_ms_per_call(const std::vector<Forward>& forwards, const torch::Tensor& input,
                                    double fastest_ms);

// Batch-1 threads of any variant, measured at load: `forward` timed at batch 1 on the whole pool and on one
// thread, alternately (3-9 timed calls each, within about half a second), the fastest call of each compared.
struct Batch1Threads {
  int threads = 0;  // 0 (the pool) when the pool ran batch 1 >= 10% faster than one thread, else 1
  int pool = 0;     // the pool's threads compared (0: not measured, a one-core machine)
  double one_thread_ms = 0.0;
  double pool_ms = 0.0;
  // Static int8 programs: XNNPACK's int8 runtime on the calling thread, timed at batch 1 against the setting
  // above (0: not timed), and whether batch 1 runs on it (it agreed with LibTorch's int8 kernels and was
  // faster; within 10% of the pool it wins too, on fewer threads).
  double xnnpack_ms = 0.0;
  bool xnnpack = false;
  bool onednn = false;  // fp32: batch 1 runs on oneDNN's runtime (Fp32EngineChoice::batch1_engine)
  // "batch 1 on one thread: 0.150 ms vs 0.270 ms on 2" (one thread chosen), "batch 1 on XNNPACK's int8
  // runtime: ..." (XNNPACK chosen), else "".
  std::string describe() const;
};
Json to_json(const Batch1Threads& measured);

// Static and QAT int8 variants: batches of one size (RunOptions::fp32_engine_batch, the bench's or server's
// largest) on XNNPACK's int8 runtime on a pthreadpool of the run's threads, where it agrees with LibTorch's
// int8 kernels (their batch-1 check, on a row of a full batch) and times >= 10% faster on the same threads
// at load; then raced call by call like fp32's batch route.
struct Int8BatchEngine {
  std::int64_t batch = 0;
  int threads = 0;
  double libtorch_ms = 0.0, xnnpack_ms = 0.0;  // per batch at load (0: not timed)
  bool xnnpack = false;                        // batches of `batch` run on XNNPACK's runtime
  std::int64_t min_rows = 0;                   // and batches from this many rows, padded to `batch`
  int row_parts = 0;   // > 0: the rows split across this many one-thread runtimes; 0: one runtime on the pool
  std::string reason;  // what was timed or why not
};
Json to_json(const Int8BatchEngine& engine);
// `pool_threads`: the threads of the pool the run will use (0: the CPUs this process may use: affinity and
// cgroup quota); nothing is measured when that is one.
Batch1Threads measure_batch1_threads(const std::function<torch::Tensor(const torch::Tensor&)>& forward,
                                     const std::vector<std::int64_t>& sample_shape, int pool_threads);

// A candidate engine: how to run a [B, ...sample] batch.
struct Fp32Candidate {
  Fp32Engine engine;
  std::function<torch::Tensor(const torch::Tensor&)> forward;
};

// Times the candidates (the first is eager, the reference) alternately at batch 1 and at `batch` on uniform
// [0, 1) inputs of `sample_shape`, and picks the lowest geometric mean of the two times among the exact ones
// (exact: within kFp32EngineTolerance of eager on those inputs and on fp32_wide_difference's).
// A candidate that throws is dropped, and the reason says so. Budget per batch size, after one warm-up
// forward each: 3 rounds when the times are 1.5x apart, else up to 9 rounds or about a second.
Fp32EngineChoice choose_fp32_engine(const std::vector<Fp32Candidate>& candidates,
                                    const std::vector<std::int64_t>& sample_shape, std::int64_t batch);

// How far `candidate` is from `reference` (eager) on one uniform [batch, ...sample_shape] input, each given
// its own copy: max |difference| / max(1, max finite |reference|); equal NaN/inf places count as 0, a NaN on
// one side only or another output shape as INFINITY. Throws what either forward throws.
double fp32_difference(const std::function<torch::Tensor(const torch::Tensor&)>& reference,
                       const std::function<torch::Tensor(const torch::Tensor&)>& candidate,
                       const std::vector<std::int64_t>& sample_shape, std::int64_t batch);

// The same on [batch, ...] normal(0, 2) values and on normal(0, 100) values (the larger of the two): what a
// [0, 1) pixel batch never shows (normalised inputs: negatives, magnitudes up to ~8; raw 0-255 pixels), e.g.
// a NaN from sqrt of a negative that a fused clamp turns into a number, an in-place clamp of the input that a
// graph pass moved, or LibTorch 1.13's optimize_for_inference answering a convolution + clamp(-0.5, 0.7)
// graph 1.4x off at magnitudes of ~50 (exact on [0, 1)). Throws what either forward throws.
double fp32_wide_difference(const std::function<torch::Tensor(const torch::Tensor&)>& reference,
                            const std::function<torch::Tensor(const torch::Tensor&)>& candidate,
                            const std::vector<std::int64_t>& sample_shape, std::int64_t batch = 1);

// Rewrites every aten::linear of a frozen module's forward into ipj::linear, which runs a [1, K] input as a
// matrix-vector product (OpenBLAS's sgemm is 4-5x slower than its sgemv at M = 1) and anything else as
// aten::linear. Returns how many were rewritten. In-memory only: a saved module would need ipj's operator.
int use_batch1_linear(torch::jit::Module& module);

}  // namespace ipj::infer

namespace ipj {

template <>
struct ChoiceNames<infer::XnnpackForm> {
  static constexpr std::array<std::pair<infer::XnnpackForm, const char*>, 3> names{
      {{infer::XnnpackForm::none, "none"},
       {infer::XnnpackForm::runtime, "runtime"},
       {infer::XnnpackForm::operators, "operators"}}};
};

template <>
struct ChoiceNames<infer::Preference> {
  static constexpr std::array<std::pair<infer::Preference, const char*>, 2> names{
      {{infer::Preference::joules, "joules"}, {infer::Preference::latency, "latency"}}};
};

template <>
struct ChoiceNames<infer::Fp32Engine> {
  static constexpr std::array<std::pair<infer::Fp32Engine, const char*>, 5> names{
      {{infer::Fp32Engine::auto_select, "auto"},
       {infer::Fp32Engine::eager, "eager"},
       {infer::Fp32Engine::frozen, "frozen"},
       {infer::Fp32Engine::xnnpack, "xnnpack"},
       {infer::Fp32Engine::onednn, "onednn"}}};
};

}  // namespace ipj
