// The runtime a re-planned server's batch route builds for a shrunk plan's fewer threads
// (fewer_threads_builder, src/infer/graph_models.hpp): a row split's plan on one thread gets another form
// (it ran the chosen engine, frozen TorchScript at ~0.6x, beside a busy loop), the forced pool stays a pool.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <string>

#include "infer/graph_ir_fixture.hpp"
#include "infer/graph_models.hpp"
#include "ipj/device/threading.hpp"
#include "ipj/infer/onednn_runtime.hpp"
#include "ipj/infer/xnnpack_runtime.hpp"

namespace ipj::infer {
namespace {

namespace fixture = graph_fixture;  // not a using-directive: the unity build shares this namespace

struct EveryKindCase {
  std::shared_ptr<fixture::GraphInterpreter> eager =
      std::make_shared<fixture::GraphInterpreter>(fixture::every_kind_graph());
  GraphIrSource graph_ir = [] { return fixture::every_kind_graph(); };
  std::vector<std::int64_t> sample_shape{3, 11, 11};
};

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
  const BatchRouteModels::FewerThreadsRuntime built = build(1);
  ASSERT_TRUE(built.runtime) << built.note;
  EXPECT_TRUE(built.name == "oneDNN's runtime" || built.name == "XNNPACK's runtime") << built.name;
  EXPECT_NE(built.note.find("XNNPACK's row split needs 2 threads and 2 rows each; the fastest on them: "
                            "oneDNN's runtime "),
            std::string::npos)
      << built.note;
  EXPECT_NE(built.note.find(" ms, XNNPACK's runtime "), std::string::npos) << built.note;
  expect_answers_as_interpreter(*built.runtime);

  // on two threads the plan's own form, its name left to the plan's
  const device::CallerOpenMpThreads two(2);
  const BatchRouteModels::FewerThreadsRuntime split = build(2);
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
                            {BatchRuntimeForm::xnnpack_split, 8, 2, 40.0, false})(1);
  ASSERT_TRUE(slow.runtime) << slow.note;
  EXPECT_EQ(slow.name, onednn_runtime_available() ? "oneDNN's runtime" : "XNNPACK's runtime");
  EXPECT_EQ(slow.note, "XNNPACK's row split needs 2 threads and 2 rows each");
  expect_answers_as_interpreter(*slow.runtime);

  const BatchRouteModels::FewerThreadsRuntime forced = fewer_threads_builder(
      model.eager, model.graph_ir, model.sample_shape, {BatchRuntimeForm::xnnpack_pool, 8, 2, 0.0, true})(1);
  ASSERT_TRUE(forced.runtime) << forced.note;
  EXPECT_EQ(forced.name, "");
  EXPECT_EQ(forced.note, "");
  const std::uint64_t before = xnnpack_runtime_calls();
  expect_answers_as_interpreter(*forced.runtime);
  EXPECT_EQ(xnnpack_runtime_calls() - before, 1u);

  // forced on a split (never made so, but a plan only of a form that cannot run there): none, said why
  const BatchRouteModels::FewerThreadsRuntime none = fewer_threads_builder(
      model.eager, model.graph_ir, model.sample_shape, {BatchRuntimeForm::xnnpack_split, 8, 2, 0.5, true})(1);
  EXPECT_FALSE(none.runtime);
  EXPECT_EQ(none.note, "no runtime form runs on 1 thread(s)");
}

}  // namespace
}  // namespace ipj::infer
