// The batch routes' rules (src/infer/graph_models.hpp, xnnpack_runtime.hpp): the runtime a re-planned server
// builds for a shrunk plan's fewer threads (a row split's plan on one thread gets another form: it ran the
// chosen engine, frozen TorchScript at ~0.6x, beside a busy loop; the forced pool stays a pool), when batch 1
// takes XNNPACK's pool (--prefer joules weighs its CPU per call, latency only its speed), which inputs and
// rows a runtime takes, and the batch size a bench times.
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <thread>

#include "depthwise_model.hpp"
#include "infer/graph_ir_fixture.hpp"
#include "infer/graph_models.hpp"
#include "ipj/core/error.hpp"
#include "ipj/device/threading.hpp"
#include "ipj/infer/fp32_engine.hpp"
#include "ipj/infer/model_bench.hpp"
#include "ipj/infer/onednn_runtime.hpp"
#include "ipj/infer/xnnpack_runtime.hpp"
#include "support/test_support.hpp"

namespace ipj::infer {
namespace {

namespace fixture = graph_fixture;  // not a using-directive: the unity build shares this namespace

struct EveryKindCase {
  std::shared_ptr<fixture::GraphInterpreter> eager =
      std::make_shared<fixture::GraphInterpreter>(fixture::every_kind_graph());
  GraphIrSource graph_ir = [] { return fixture::every_kind_graph(); };
  std::vector<std::int64_t> sample_shape{3, 11, 11};
};

// A builder's `cancelled` for a route that is not closing, and for one that is.
const std::atomic<bool> kRunning{false};
const std::atomic<bool> kClosing{true};

// The built runtime answers [8, 3, 11, 11] as the graph interpreter.
void expect_answers_as_interpreter(const InferenceModel& runtime) {
  torch::NoGradGuard no_grad;
  const torch::Tensor pixels = torch::rand({8, 3, 11, 11});
  EXPECT_LT(fixture::relative_difference(runtime.forward(pixels),
                                         quant::run_graph(fixture::every_kind_graph(), pixels)),
            1e-5);
}

TEST(FewerThreadsRuntime, ARowSplitsPlanOnOneThreadGetsTheFastestFormThatRunsThere) {
  if (!xnnpack_runtime_available() || !onednn_runtime_available())
    GTEST_SKIP() << "needs XNNPACK and oneDNN runtimes";
  const EveryKindCase model;
  const FewerThreadsPlan plan{BatchRuntimeForm::xnnpack_split, 8, 2, 0.5, false};
  const BatchRouteModels::RuntimeBuilder build =
      fewer_threads_builder(model.eager, model.graph_ir, model.sample_shape, plan);
  const device::CallerOpenMpThreads one(1);
  const BatchRouteModels::FewerThreadsRuntime built = build(1, kRunning);
  ASSERT_TRUE(built.runtime) << built.note;
  EXPECT_TRUE(built.name == "oneDNN's runtime" || built.name == "XNNPACK's runtime") << built.name;
  EXPECT_NE(built.note.find("XNNPACK's row split needs 2 threads and 2 rows each; the fastest on them: "
                            "oneDNN's runtime "),
            std::string::npos)
      << built.note;
  EXPECT_NE(built.note.find(" ms, XNNPACK's runtime "), std::string::npos) << built.note;
  expect_answers_as_interpreter(*built.runtime);

  // a route closing (a server stopping): nothing more is built
  const BatchRouteModels::FewerThreadsRuntime cancelled = build(1, kClosing);
  EXPECT_FALSE(cancelled.runtime);
  EXPECT_EQ(cancelled.note, "cancelled: the route is closing");

  // on two threads the plan's own form, its name left to the plan's
  const device::CallerOpenMpThreads two(2);
  const BatchRouteModels::FewerThreadsRuntime split = build(2, kRunning);
  ASSERT_TRUE(split.runtime) << split.note;
  EXPECT_EQ(split.name, "");
  EXPECT_EQ(split.note.find("needs 2 threads"), std::string::npos) << split.note;
  expect_answers_as_interpreter(*split.runtime);
}

TEST(FewerThreadsRuntime, TooSlowToTimeTheFirstFormThatBuildsAndAForcedPoolStaysAPool) {
  if (!xnnpack_runtime_available()) GTEST_SKIP() << "built without XNNPACK";
  const EveryKindCase model;
  const device::CallerOpenMpThreads one(1);
  // 40 ms per batch on two threads is 80 on one: not timed, the preferred form that builds
  const BatchRouteModels::FewerThreadsRuntime slow =
      fewer_threads_builder(model.eager, model.graph_ir, model.sample_shape,
                            {BatchRuntimeForm::xnnpack_split, 8, 2, 40.0, false})(1, kRunning);
  ASSERT_TRUE(slow.runtime) << slow.note;
  EXPECT_EQ(slow.name, onednn_runtime_available() ? "oneDNN's runtime" : "XNNPACK's runtime");
  EXPECT_EQ(slow.note, "XNNPACK's row split needs 2 threads and 2 rows each");
  expect_answers_as_interpreter(*slow.runtime);

  const BatchRouteModels::FewerThreadsRuntime forced =
      fewer_threads_builder(model.eager, model.graph_ir, model.sample_shape,
                            {BatchRuntimeForm::xnnpack_pool, 8, 2, 0.0, true})(1, kRunning);
  ASSERT_TRUE(forced.runtime) << forced.note;
  EXPECT_EQ(forced.name, "");
  EXPECT_EQ(forced.note, "");
  const std::uint64_t before = xnnpack_runtime_calls();
  expect_answers_as_interpreter(*forced.runtime);
  EXPECT_EQ(xnnpack_runtime_calls() - before, 1u);

  // forced on a split (never made so, but a plan only of a form that cannot run there): none, said why
  const BatchRouteModels::FewerThreadsRuntime none =
      fewer_threads_builder(model.eager, model.graph_ir, model.sample_shape,
                            {BatchRuntimeForm::xnnpack_split, 8, 2, 0.5, true})(1, kRunning);
  EXPECT_FALSE(none.runtime);
  EXPECT_EQ(none.note, "no runtime form runs on 1 thread(s)");
}

TEST(Batch1Pool, PreferringJoulesWeighsTheCpuPerCallLatencyOnlyTheSpeedUp) {
  // ResNet-18 at batch 1 on 12-07: the pool 0.351 ms vs the calling thread 0.603 ms at 1.18x / 1.25x its CPU
  EXPECT_TRUE(batch1_pool_wins(0.603, 0.351, 1.18, Preference::joules));
  EXPECT_FALSE(batch1_pool_wins(0.603, 0.351, 1.25, Preference::joules));
  EXPECT_TRUE(batch1_pool_wins(0.603, 0.351, 1.25, Preference::latency));
  EXPECT_TRUE(batch1_pool_wins(0.603, 0.351, 3.0, Preference::latency));
  EXPECT_FALSE(batch1_pool_wins(0.603, 0.351, 0.0, Preference::joules));  // CPU not measured
  EXPECT_TRUE(batch1_pool_wins(0.603, 0.351, 0.0, Preference::latency));
  // the speed-up is needed either way: 1.25x, not 1.2x
  EXPECT_TRUE(batch1_pool_wins(1.25, 1.0, 1.0, Preference::joules));
  EXPECT_FALSE(batch1_pool_wins(1.2, 1.0, 1.0, Preference::joules));
  EXPECT_FALSE(batch1_pool_wins(1.2, 1.0, 1.0, Preference::latency));
  EXPECT_FALSE(batch1_pool_wins(1.0, 0.0, 1.0, Preference::latency));  // not timed
  EXPECT_EQ(parse_choice<Preference>("latency", "--prefer"), Preference::latency);
  EXPECT_THROW(parse_choice<Preference>("speed", "--prefer"), Error);
}

// What may reach an XNNPACK runtime: numbers of magnitude <= kLargestXnnpackInput, checked by a loop on
// contiguous float tensors and by ATen's reduction on others, with the same answers.
TEST(BatchedXnnpack, TameInputsAreFiniteAndNotHugeWhateverTheirLayout) {
  torch::Tensor values = torch::rand({4, 3, 5});
  for (const float odd : {NAN, INFINITY, -INFINITY, 2 * kLargestXnnpackInput, -kLargestXnnpackInput, 0.0f}) {
    values[3][2][4] = odd;
    const bool expected = !std::isnan(odd) && std::fabs(odd) <= kLargestXnnpackInput;
    EXPECT_EQ(tame_for_xnnpack(values), expected) << odd;
    EXPECT_EQ(tame_for_xnnpack(values.transpose(0, 2)), expected) << odd;  // not contiguous: ATen
    EXPECT_EQ(tame_for_xnnpack(values.to(torch::kDouble)), expected) << odd;
  }
  EXPECT_TRUE(tame_for_xnnpack(torch::empty({0, 3})));
}

// The padding threshold: XNNPACK's time per full batch over 90% of the chosen engine's, as rows, in [2,
// batch].
TEST(BatchedXnnpack, PaddedMinRowsIsTheRowsWhereTheRuntimeStillWinsByTenPercent) {
  EXPECT_EQ(padded_min_rows(64, 10.0, 4.5), 32);  // 64 x 4.5 / 9, exact in binary
  EXPECT_EQ(padded_min_rows(64, 10.0, 4.6), 33);
  EXPECT_EQ(padded_min_rows(64, 1.0, 0.01), 2);   // never one row
  EXPECT_EQ(padded_min_rows(64, 1.0, 0.95), 64);  // no win: the full batch only (the race decides it)
  EXPECT_EQ(padded_min_rows(64, 0.0, 0.5), 64);   // no timing
  EXPECT_EQ(padded_min_rows(1, 1.0, 0.1), 1);
}

// The batch-1 pool's part of a choice made with choice.prefer, and its JSON.
void expect_batch1_pool_recorded(const Fp32EngineChoice& choice) {
  const Json json = to_json(choice);
  EXPECT_EQ(json["prefer"], choice_name(choice.prefer));
  if (choice.batch1_engine == Fp32Engine::xnnpack && choice.batch1_xnnpack_form == XnnpackForm::runtime) {
    EXPECT_GT(choice.batch1_pool_ms, 0.0) << choice.reason;
    EXPECT_GT(choice.batch1_pool_cpu_ratio, 0.0) << choice.reason;
    EXPECT_NE(choice.reason.find("; batch 1 on XNNPACK's pool of 2 "), std::string::npos) << choice.reason;
    EXPECT_EQ(choice.reason.find("(--prefer latency: the CPU not weighed)") != std::string::npos,
              choice.prefer == Preference::latency)
        << choice.reason;
    EXPECT_TRUE(choice.batch1_pool_threads == 0 || choice.batch1_pool_threads == 2) << choice.reason;
    if (choice.batch1_pool_threads == 2 && choice.prefer == Preference::joules) {  // what won
      EXPECT_LE(choice.batch1_pool_cpu_ratio, kBatch1PoolMaxCpuRatio) << choice.reason;
    }
  } else {
    EXPECT_EQ(choice.batch1_pool_ms, 0.0) << choice.reason;
    EXPECT_EQ(choice.batch1_pool_threads, 0) << choice.reason;
  }
  EXPECT_EQ(json["batch1_pool_threads"], choice.batch1_pool_threads);
  EXPECT_EQ(json["batch1_pool_ms"], choice.batch1_pool_ms);
  EXPECT_EQ(json["batch1_pool_cpu_ratio"], choice.batch1_pool_cpu_ratio);
}

// Back-to-back and spaced batch-1 calls, and a NaN, answer as `reference` (the model in PyTorch).
void expect_batch1_answers_as(const InferenceModel& model, torch::jit::Module& reference) {
  torch::NoGradGuard no_grad;
  const device::CallerOpenMpThreads two(2);
  for (int call = 0; call < 40; ++call) {
    if (call % 10 == 9) std::this_thread::sleep_for(std::chrono::milliseconds(3));  // past the gap
    const torch::Tensor single = torch::rand({1, 1, 12, 12});
    EXPECT_LT((model.forward(single) - reference.forward({single}).toTensor()).abs().max().item<double>(),
              1e-4)
        << "call " << call;
  }
  torch::Tensor with_nan = torch::rand({1, 1, 12, 12});
  with_nan[0][0][6][6] = NAN;
  EXPECT_TRUE(model.forward(with_nan).isnan().all().item<bool>());  // as in eager
}

// Auto at batch 1: where XNNPACK's runtime on the calling thread runs batch 1, the same runtime on a pool of
// the run's threads is checked, timed (latency and CPU per call) and recorded, its CPU weighed unless the run
// prefers latency; whichever runs, back-to-back and spaced batch-1 calls answer as eager.
TEST(BatchedXnnpack, Batch1OnAPoolIsTimedRecordedAndAnswersAsEager) {
  if (!xnnpack_runtime_available()) GTEST_SKIP() << "built without XNNPACK";
  testing::TempDir dir;
  depthwise_module().save(dir.file("depthwise.pt"));
  torch::jit::Module reference = torch::jit::load(dir.file("depthwise.pt"));
  reference.eval();
  for (const Preference prefer : {Preference::joules, Preference::latency}) {
    SCOPED_TRACE(choice_name(prefer));
    LoadOptions options = depthwise_options(Fp32Engine::auto_select, 8);
    options.run.pool_threads = 2;
    options.run.prefer = prefer;
    const InferenceModelPtr model = load_inference_model(dir.file("depthwise.pt"), options);
    ASSERT_TRUE(model->fp32_engine);
    expect_batch1_pool_recorded(*model->fp32_engine);
    expect_batch1_answers_as(*model, reference);
  }
}

// ipj bench times the largest batch it runs up to 64; where every batch run is larger, the engines are timed
// at 64 and no XNNPACK runtime is built for a size no row uses.
TEST(BatchedXnnpack, BenchTimesABatchItsRowsRun) {
  testing::TempDir dir;
  depthwise_module().save(dir.file("depthwise.pt"));
  ModelBenchOptions options;
  options.model_path = dir.file("depthwise.pt");
  options.load.inputs.input_shape = {1, 12, 12};
  options.variants = {Variant::fp32};
  options.bench.warmup_s = 0.01;
  options.bench.window_s = 0.02;
  options.bench.max_windows = 1;
  options.measure_accuracy = false;
  options.measure_energy = false;
  options.batches = {1, 100};
  ModelBenchReport report = run_model_bench(options);
  ASSERT_EQ(report.variants.size(), 1u);
  ASSERT_TRUE(report.variants[0].fp32_engine);
  EXPECT_EQ(report.variants[0].fp32_engine->batch, 64);
  EXPECT_EQ(report.variants[0].fp32_engine->batch_engine, report.variants[0].fp32_engine->engine);
  const std::string& reason = report.variants[0].fp32_engine->reason;
  EXPECT_EQ(report.variants[0].fp32_engine->batch_xnnpack_threads, 0) << reason;
  if (xnnpack_runtime_available()) {
    EXPECT_NE(reason.find("no runtime for batch 64 (no row runs that size)"), std::string::npos) << reason;
  }
  options.batches = {1, 8, 100};
  report = run_model_bench(options);
  ASSERT_TRUE(report.variants[0].fp32_engine);
  EXPECT_EQ(report.variants[0].fp32_engine->batch, 8);
  if (xnnpack_runtime_available()) {  // built, checked and timed at 8
    EXPECT_GT(report.variants[0].fp32_engine->batch_xnnpack_ms, 0.0)
        << report.variants[0].fp32_engine->reason;
  }
}

}  // namespace
}  // namespace ipj::infer
