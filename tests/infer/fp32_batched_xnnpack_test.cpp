// Larger batches of the fp32 variant on XNNPACK's runtime: the route (which inputs reach the runtime, on
// which threads), and models loaded with it forced or timed, whose answers at the routed size are eager's.
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>

#include "depthwise_model.hpp"
#include "ipj/core/error.hpp"
#include "ipj/device/threading.hpp"
#include "ipj/infer/fp32_engine.hpp"
#include "ipj/infer/inference_model.hpp"
#include "ipj/infer/model_bench.hpp"
#include "ipj/infer/onednn_runtime.hpp"
#include "ipj/infer/xnnpack_runtime.hpp"
#include "support/test_support.hpp"

namespace ipj::infer {
namespace {

// Answers [B, 1] filled with `mark`: which model a route sent an input to.
class MarkModel : public InferenceModel {
 public:
  explicit MarkModel(float mark) : mark_(mark) {}
  torch::Tensor forward(const torch::Tensor& input) const override {
    return torch::full({input.size(0), 1}, mark_);
  }

 private:
  float mark_;
};

float mark_of(const InferenceModel& model, const torch::Tensor& input) {
  return model.forward(input)[0][0].item<float>();
}

TEST(BatchedXnnpack, OnlyTheBuiltShapeOnEnoughThreadsAndTameValuesReachTheRuntime) {
  const auto chosen = std::make_shared<MarkModel>(1.0f), runtime = std::make_shared<MarkModel>(2.0f),
             fallback = std::make_shared<MarkModel>(3.0f);
  chosen->model_name = "chosen";
  const auto route = xnnpack_batch_route({chosen, runtime, fallback}, {{8, 1, 4, 4}, 2, 8});
  EXPECT_EQ(route->model_name, "chosen");  // describes itself as the chosen engine
  const device::CallerOpenMpThreads two(2);
  if (device::caller_openmp_threads() != 2) GTEST_SKIP() << "no OpenMP runtime to set the caller's threads";
  EXPECT_EQ(mark_of(*route, torch::rand({8, 1, 4, 4})), 2.0f);
  EXPECT_EQ(mark_of(*route, torch::rand({7, 1, 4, 4})), 1.0f);  // another batch size
  EXPECT_EQ(mark_of(*route, torch::rand({8, 1, 4, 5})), 1.0f);  // another sample shape
  EXPECT_EQ(mark_of(*route, torch::rand({8, 16})), 1.0f);
  torch::Tensor with_nan = torch::rand({8, 1, 4, 4});
  with_nan[7][0][3][3] = NAN;
  EXPECT_EQ(mark_of(*route, with_nan), 3.0f);
  EXPECT_EQ(mark_of(*route, torch::full({8, 1, 4, 4}, -INFINITY)), 3.0f);
  EXPECT_EQ(mark_of(*route, torch::full({8, 1, 4, 4}, 2 * kLargestXnnpackInput)), 3.0f);
  EXPECT_EQ(mark_of(*route, torch::full({8, 1, 4, 4}, kLargestXnnpackInput)), 2.0f);
  const int blas_before = device::blas_thread_count();
  if (blas_before < 0) GTEST_SKIP() << "the loaded BLAS is not OpenBLAS";
  {
    const device::CallerOpenMpThreads one(1);
    device::set_blas_threads(2);  // a GEMM-bound plan: ATen at one thread, OpenBLAS on both cores
    EXPECT_EQ(mark_of(*route, torch::rand({8, 1, 4, 4})), 2.0f);
    device::set_blas_threads(1);  // a plan shrunk for a busy machine: a pool of two would wait for a core
    EXPECT_EQ(mark_of(*route, torch::rand({8, 1, 4, 4})), 1.0f);
  }
  EXPECT_EQ(mark_of(*route, torch::rand({8, 1, 4, 4})), 2.0f);
  device::set_blas_threads(blas_before);
}

// Calls until `route` answers `mark` at the caller's threads (a runtime built in the background), at most 10
// s; the mark of the last call.
float mark_once_built(const InferenceModel& route, const torch::Tensor& input, float mark) {
  float last = mark_of(route, input);
  for (int wait = 0; wait < 1000 && last != mark; ++wait) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    last = mark_of(route, input);
  }
  return last;
}

// A re-planned server's shrunk plan: calls on fewer threads than the plan's runtime wants run the chosen
// engine while a runtime for their threads is built on the route's own thread (once per thread count, on
// that many OpenMP threads), then run on it; back on the plan's threads, the plan's runtime. A runtime that
// cannot be built is not tried again, and a route destroyed while one is being built tells the builder to
// give up and waits for it.
TEST(BatchedXnnpack, CallsOnFewerThreadsRunARuntimeBuiltForThemOnceItIsReady) {
  const int blas_before = device::blas_thread_count();
  const device::CallerOpenMpThreads two(2);
  if (device::caller_openmp_threads() != 2 || blas_before < 0)
    GTEST_SKIP() << "needs OpenMP and OpenBLAS to set the caller's threads";
  const auto chosen = std::make_shared<MarkModel>(1.0f), runtime = std::make_shared<MarkModel>(2.0f),
             fallback = std::make_shared<MarkModel>(3.0f);
  std::atomic<int> builds{0}, built_threads{0}, builder_openmp_threads{0};
  BatchRouteModels models{chosen, runtime, fallback};
  models.xnnpack_for_fewer_threads = [&](int threads,
                                         const std::atomic<bool>&) -> BatchRouteModels::FewerThreadsRuntime {
    builds += 1;
    built_threads = threads;
    builder_openmp_threads = device::caller_openmp_threads();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a build takes a while
    return {std::make_shared<MarkModel>(4.0f), "", ""};
  };
  const auto route = xnnpack_batch_route(models, {{8, 3}, 2, 8});
  const torch::Tensor batch = torch::rand({8, 3});
  EXPECT_EQ(mark_of(*route, batch), 2.0f);  // the plan's threads: nothing built
  EXPECT_EQ(builds.load(), 0);
  device::set_blas_threads(1);
  {
    const device::CallerOpenMpThreads one(1);
    EXPECT_EQ(mark_of(*route, batch), 1.0f);  // starts the build; the chosen engine meanwhile
    EXPECT_EQ(mark_once_built(*route, batch, 4.0f), 4.0f);
    EXPECT_EQ(built_threads.load(), 1);
    EXPECT_EQ(builder_openmp_threads.load(), 1);
    EXPECT_EQ(mark_of(*route, torch::full({8, 3}, NAN)), 3.0f);  // still kept off XNNPACK
    EXPECT_EQ(mark_of(*route, torch::rand({7, 3})), 1.0f);       // another size
  }
  device::set_blas_threads(2);
  EXPECT_EQ(mark_of(*route, batch), 2.0f);
  EXPECT_EQ(builds.load(), 1);

  std::atomic<int> failed_builds{0};
  models.xnnpack_for_fewer_threads = [&](int,
                                         const std::atomic<bool>&) -> BatchRouteModels::FewerThreadsRuntime {
    failed_builds += 1;
    return {nullptr, "", "a node XNNPACK cannot take"};
  };
  const auto refusing = xnnpack_batch_route(models, {{8, 3}, 2, 8});
  device::set_blas_threads(1);
  {
    const device::CallerOpenMpThreads one(1);
    for (int call = 0; call < 50; ++call) {
      EXPECT_EQ(mark_of(*refusing, batch), 1.0f);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    EXPECT_EQ(failed_builds.load(), 1);
    // a build that would take 10 s, destroyed (a server stopping): the builder is told and the route waits
    // only for its next step (a hostile pass, 12-07: `ipj serve` exited 2-9 s after "stopped")
    std::atomic<bool> building{false}, told{false};
    models.xnnpack_for_fewer_threads =
        [&](int, const std::atomic<bool>& cancelled) -> BatchRouteModels::FewerThreadsRuntime {
      building = true;
      for (int step = 0; step < 1000 && !cancelled; ++step)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      told = cancelled.load();
      return {nullptr, "", "cancelled"};
    };
    auto destroyed = xnnpack_batch_route(models, {{8, 3}, 2, 8});
    EXPECT_EQ(mark_of(*destroyed, batch), 1.0f);
    while (!building)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const auto start = std::chrono::steady_clock::now();
    destroyed.reset();  // tells its builder, then joins it
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 2.0);
    EXPECT_TRUE(told.load());
  }
  device::set_blas_threads(blas_before);
}

// Batches of min_rows..batch-1 rows are padded with zero rows to the runtime's batch; the caller gets its own
// rows back.
TEST(BatchedXnnpack, PartialBatchesFromMinRowsArePaddedToTheRuntimesBatch) {
  // Answers [B, 2]: each row's sum and the batch size it was run at.
  class RowSums : public InferenceModel {
   public:
    torch::Tensor forward(const torch::Tensor& input) const override {
      const torch::Tensor sums = input.flatten(1).sum(1, true);  // [B, 1]
      return torch::cat({sums, torch::full_like(sums, static_cast<float>(input.size(0)))}, 1);
    }
  };
  const auto chosen = std::make_shared<MarkModel>(-1.0f);
  const auto runtime = std::make_shared<RowSums>();
  const auto route = xnnpack_batch_route({chosen, runtime, chosen}, {{8, 3}, 1, 6});
  const device::CallerOpenMpThreads one(1);
  const torch::Tensor six = torch::rand({6, 3});
  const torch::Tensor answer = route->forward(six);  // [6, 2]
  ASSERT_EQ(answer.sizes(), torch::IntArrayRef({6, 2}));
  EXPECT_TRUE(torch::allclose(answer.select(1, 0), six.sum(1)));
  EXPECT_TRUE(answer.select(1, 1).eq(8.0f).all().item<bool>()) << answer;  // run as a batch of 8
  EXPECT_EQ(route->forward(torch::rand({8, 3}))[7][1].item<float>(), 8.0f);
  EXPECT_EQ(route->forward(torch::rand({5, 3}))[0][0].item<float>(), -1.0f);  // below min_rows
  EXPECT_EQ(route->forward(torch::rand({9, 3}))[0][0].item<float>(), -1.0f);  // above the batch
  EXPECT_EQ(route->forward(torch::rand({6, 3}).to(torch::kDouble))[0][0].item<float>(), -1.0f);
}

// Sleeps `ms` per call (settable while a route holds it), then answers [B, 1] filled with `mark`.
class Sleepy : public InferenceModel {
 public:
  Sleepy(float mark, int ms) : mark_(mark), ms(ms) {}
  torch::Tensor forward(const torch::Tensor& input) const override {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms.load()));
    return torch::full({input.size(0), 1}, mark_);
  }
  float mark_;
  std::atomic<int> ms;
};

void sleep_seconds(double seconds) {
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

// Raced (bench and serve's auto engine): the engine whose recent calls cost less (median) runs; a runtime
// that turns slow (its pool waiting for cores other work holds) gets the other engine probed after two calls
// and loses to it, is probed at 1 s, then 2 s (three calls each: a warm-up not counted, then the slower of
// two), and takes over again when a probe is faster; one slow call of any size (a scheduler hiccup, a worker
// woken from deep sleep) switches nothing.
TEST(BatchedXnnpack, TheEngineWhoseRecentCallsCostLessRunsAndTheOtherIsProbed) {
  // chosen 40 ms a call: a 2-ms call that oversleeps on a loaded CPU (ctest -j2) still wins by far
  const auto chosen = std::make_shared<Sleepy>(1.0f, 40);
  const auto runtime = std::make_shared<Sleepy>(2.0f, 100);
  // load-time timings: chosen 50 ms, XNNPACK 25 ms per full batch of 4
  const auto route = xnnpack_batch_route({chosen, runtime, chosen}, {{4, 3}, 1, 4, 50.0, 25.0});
  const device::CallerOpenMpThreads one(1);
  const torch::Tensor batch = torch::rand({4, 3});
  EXPECT_EQ(mark_of(*route, batch), 2.0f);  // XNNPACK ahead: 100 ms now (one slow call)
  EXPECT_EQ(mark_of(*route, batch), 2.0f);  // still ahead: its median is 25 ms
  EXPECT_EQ(mark_of(*route, batch), 1.0f);  // slower than the chosen engine's history: that is probed now
  EXPECT_EQ(mark_of(*route, batch), 1.0f);
  EXPECT_EQ(mark_of(*route, batch), 1.0f);  // 40 ms twice against 100: it takes over
  EXPECT_EQ(mark_of(*route, batch), 1.0f);
  sleep_seconds(kEngineProbeFirstS + 0.1);
  EXPECT_EQ(mark_of(*route, batch), 2.0f);  // the probe's warm-up call
  runtime->ms = 2;                          // one lucky call
  EXPECT_EQ(mark_of(*route, batch), 2.0f);
  runtime->ms = 100;
  EXPECT_EQ(mark_of(*route, batch), 2.0f);  // the slower of the two counts: still behind, next in 2 s
  EXPECT_EQ(mark_of(*route, batch), 1.0f);
  sleep_seconds(kEngineProbeFirstS + 0.1);
  EXPECT_EQ(mark_of(*route, batch), 1.0f);  // not yet
  sleep_seconds(kEngineProbeFirstS);
  runtime->ms = 200;                        // a cold first call does not count
  EXPECT_EQ(mark_of(*route, batch), 2.0f);  // warm-up
  runtime->ms = 2;
  EXPECT_EQ(mark_of(*route, batch), 2.0f);
  EXPECT_EQ(mark_of(*route, batch), 2.0f);  // the probe: 2 ms twice, ahead again
  EXPECT_EQ(mark_of(*route, batch), 2.0f);
  runtime->ms = 400;  // one hiccup, however long
  EXPECT_EQ(mark_of(*route, batch), 2.0f);
  runtime->ms = 2;
  EXPECT_EQ(mark_of(*route, batch), 2.0f);
  EXPECT_EQ(mark_of(*route, batch), 2.0f);
  const auto unraced =
      xnnpack_batch_route({chosen, std::make_shared<Sleepy>(2.0f, 30), chosen}, {{4, 3}, 1, 4});
  EXPECT_EQ(mark_of(*unraced, batch), 2.0f);
  EXPECT_EQ(mark_of(*unraced, batch), 2.0f);  // no load-time timings (forced): XNNPACK always
}

// A lead won in the race and lost again within 32 s (a pool that gets the core a neighbour holds only now
// and then) keeps backing off: the next probe comes 4 s later, not 1 s.
// A raced plan's runtime for fewer threads is timed against the chosen engine on them when it is built: the
// rows it pads come from that timing, not the plan's (a pool of two pays for padding otherwise than one
// thread). Where the chosen engine's batch would take over 50 ms on them, the plan's rows stay.
TEST(BatchedXnnpack, ARuntimeForFewerThreadsPadsTheRowsItsOwnTimingSays) {
  const int blas_before = device::blas_thread_count();
  const device::CallerOpenMpThreads two(2);
  if (device::caller_openmp_threads() != 2 || blas_before < 0)
    GTEST_SKIP() << "needs OpenMP and OpenBLAS to set the caller's threads";
  const auto chosen = std::make_shared<Sleepy>(1.0f, 20), runtime = std::make_shared<Sleepy>(2.0f, 1);
  BatchRouteModels models{chosen, runtime, chosen};
  std::atomic<int> builds{0};
  models.xnnpack_for_fewer_threads = [&](int,
                                         const std::atomic<bool>&) -> BatchRouteModels::FewerThreadsRuntime {
    builds += 1;
    return {std::make_shared<Sleepy>(4.0f, 4), "",
            ""};  // 4 ms against the chosen engine's 20: pads from 2-3 rows
  };
  // the plan: 10 vs 9.5 ms per batch of 8 on two threads, too close to pad anything
  EXPECT_EQ(padded_min_rows(8, 10.0, 9.5), 8);
  const auto route = xnnpack_batch_route(models, {{8, 3}, 2, 8, 10.0, 9.5});
  const torch::Tensor five = torch::rand({5, 3});
  EXPECT_EQ(mark_of(*route, five), 1.0f);  // below the plan's rows
  device::set_blas_threads(1);
  {
    const device::CallerOpenMpThreads one(1);
    EXPECT_EQ(mark_once_built(*route, five, 4.0f), 4.0f);   // padded on the runtime built and timed for one
    EXPECT_EQ(mark_of(*route, torch::rand({1, 3})), 1.0f);  // never a single row
  }
  device::set_blas_threads(2);
  EXPECT_EQ(mark_of(*route, five), 1.0f);  // back on the plan's threads: its rows
  EXPECT_EQ(builds.load(), 1);

  // 30 ms per batch on two threads: 60 on one, too long to time in the background; the plan's 6 rows stay
  const auto untimed = xnnpack_batch_route(models, {{8, 3}, 2, 6, 30.0, 15.0});
  device::set_blas_threads(1);
  {
    const device::CallerOpenMpThreads one(1);
    EXPECT_EQ(mark_once_built(*untimed, torch::rand({6, 3}), 4.0f), 4.0f);
    EXPECT_EQ(mark_of(*untimed, five), 1.0f);
  }
  device::set_blas_threads(blas_before);
}

TEST(BatchedXnnpack, AnEngineThatKeepsWinningAndLosingIsProbedLessAndLessOften) {
  const auto chosen = std::make_shared<Sleepy>(1.0f, 40);  // as above: far from the 2-ms calls
  const auto runtime = std::make_shared<Sleepy>(2.0f, 100);
  const auto route = xnnpack_batch_route({chosen, runtime, chosen}, {{4, 3}, 1, 4, 50.0, 25.0});
  const device::CallerOpenMpThreads one(1);
  const torch::Tensor batch = torch::rand({4, 3});
  EXPECT_EQ(mark_of(*route, batch), 2.0f);
  EXPECT_EQ(mark_of(*route, batch), 2.0f);
  for (int call = 0; call < 3;
       ++call)  // the chosen engine's probe wins: XNNPACK led from load, probed in 1 s
    EXPECT_EQ(mark_of(*route, batch), 1.0f) << call;
  sleep_seconds(kEngineProbeFirstS + 0.1);
  runtime->ms = 2;
  for (int call = 0; call < 3; ++call)  // the probe wins
    EXPECT_EQ(mark_of(*route, batch), 2.0f) << call;
  runtime->ms = 100;
  EXPECT_EQ(mark_of(*route, batch), 2.0f);
  EXPECT_EQ(mark_of(*route, batch), 2.0f);
  for (int call = 0; call < 3; ++call)  // lost again right away
    EXPECT_EQ(mark_of(*route, batch), 1.0f) << call;
  sleep_seconds(kEngineProbeFirstS + 0.1);
  EXPECT_EQ(mark_of(*route, batch), 1.0f);  // not probed at 1 s
  sleep_seconds(kEngineProbeFirstS + 0.1);
  EXPECT_EQ(mark_of(*route, batch), 1.0f);  // nor at 2 s
}

// A slowdown both engines share (the server's own load, a busy neighbour on both) switches nothing: the side
// ahead turning slower than the other's load-time timing only gets the other probed, and its fresh calls are
// no faster.
TEST(BatchedXnnpack, ASlowdownBothEnginesShareSwitchesNothing) {
  const auto chosen = std::make_shared<Sleepy>(1.0f, 80), runtime = std::make_shared<Sleepy>(2.0f, 60);
  const auto route = xnnpack_batch_route({chosen, runtime, chosen}, {{4, 3}, 1, 4, 50.0, 25.0});
  const device::CallerOpenMpThreads one(1);
  const torch::Tensor batch = torch::rand({4, 3});
  EXPECT_EQ(mark_of(*route, batch), 2.0f);
  EXPECT_EQ(mark_of(*route, batch), 2.0f);  // 60 ms twice: above the chosen engine's 50 at load
  for (int call = 0; call < 3; ++call)      // so it is probed: 80 ms now
    EXPECT_EQ(mark_of(*route, batch), 1.0f) << call;
  for (int call = 0; call < 4; ++call)  // XNNPACK stays (next probe in 2 s)
    EXPECT_EQ(mark_of(*route, batch), 2.0f) << call;
}

// Short calls: a side's time is the median of its calls in the last 50 ms, so two calls slowed for a few ms
// (a VM's vCPU taken away) get nothing probed, while a slowdown that fills the window does.
TEST(BatchedXnnpack, ShortCallsSlowedForAFewMillisecondsSwitchNothing) {
  const auto chosen = std::make_shared<Sleepy>(1.0f, 10), runtime = std::make_shared<Sleepy>(2.0f, 1);
  const auto route = xnnpack_batch_route({chosen, runtime, chosen}, {{4, 3}, 1, 4, 10.0, 1.0});
  const device::CallerOpenMpThreads one(1);
  const torch::Tensor batch = torch::rand({4, 3});
  for (int call = 0; call < 40; ++call)
    ASSERT_EQ(mark_of(*route, batch), 2.0f) << call;
  runtime->ms = 15;  // 30 ms of the window: two calls above the chosen engine's 10 ms
  EXPECT_EQ(mark_of(*route, batch), 2.0f);
  EXPECT_EQ(mark_of(*route, batch), 2.0f);
  runtime->ms = 1;
  for (int call = 0; call < 5; ++call)  // no probe: the chosen engine never ran
    EXPECT_EQ(mark_of(*route, batch), 2.0f) << call;
  runtime->ms = 15;  // for good: once its calls fill the window, the chosen engine is probed and wins
  int slow_calls = 0;
  while (slow_calls < 10 && mark_of(*route, batch) == 2.0f)
    ++slow_calls;
  EXPECT_GE(slow_calls, 3);
  EXPECT_LE(slow_calls, 6);
  EXPECT_EQ(mark_of(*route, batch), 1.0f);  // the rest of the probe
  EXPECT_EQ(mark_of(*route, batch), 1.0f);
  EXPECT_EQ(mark_of(*route, batch), 1.0f);  // and it runs
}

// alone_only (batch 1 on a pool): a call that starts while another call of the route runs (a served model's
// instances) takes the chosen engine, and calls that overlapped another are not counted in the race (their
// pace is the route's own concurrency, not the engine's).
TEST(BatchedXnnpack, AloneOnlyCallsThatOverlapAnotherTakeTheChosenEngineAndAreNotCounted) {
  class Blocking : public InferenceModel {  // blocks 2-row inputs until released; answers 1
   public:
    torch::Tensor forward(const torch::Tensor& input) const override {
      if (input.size(0) == 2) {
        entered = true;
        while (!released)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      return torch::full({input.size(0), 1}, 1.0f);
    }
    mutable std::atomic<bool> entered{false}, released{false};
  };
  const auto blocking = std::make_shared<Blocking>();
  BatchRoutePlan alone{{1, 3}, 1, 1};
  alone.alone_only = true;
  const auto unraced = xnnpack_batch_route({blocking, std::make_shared<MarkModel>(2.0f), blocking}, alone);
  const device::CallerOpenMpThreads one(1);
  std::thread other([&] { unraced->forward(torch::rand({2, 3})); });  // on the chosen engine, held
  while (!blocking->entered)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(mark_of(*unraced, torch::rand({1, 3})), 1.0f);  // another call runs: not the runtime
  blocking->released = true;
  other.join();
  EXPECT_EQ(mark_of(*unraced, torch::rand({1, 3})), 2.0f);  // alone again

  const auto chosen = std::make_shared<Sleepy>(1.0f, 1);
  const auto runtime = std::make_shared<Sleepy>(2.0f, 100);
  BatchRoutePlan raced_plan{{4, 3}, 1, 4, 10.0, 5.0};
  raced_plan.alone_only = true;
  const auto raced = xnnpack_batch_route({chosen, runtime, chosen}, raced_plan);
  const torch::Tensor batch = torch::rand({4, 3});
  for (int overlapped = 0; overlapped < 2; ++overlapped) {
    std::thread slow([&] { EXPECT_EQ(mark_of(*raced, batch), 2.0f); });  // alone at its start: the runtime
    sleep_seconds(0.03);
    EXPECT_EQ(mark_of(*raced, batch), 1.0f);  // started during it: the chosen engine
    slow.join();
  }
  EXPECT_EQ(mark_of(*raced, batch), 2.0f);  // the two overlapped 100 ms calls were not counted
  EXPECT_EQ(mark_of(*raced, batch), 2.0f);  // two solo ones are
  EXPECT_EQ(mark_of(*raced, batch), 1.0f);
}

// With a gap (batch 1 on a pool): only calls that start within it of the previous call's end reach the
// runtime; the first call, and one after a pause, run on the chosen engine (the calling thread).
TEST(BatchedXnnpack, WithAGapOnlyBackToBackCallsReachTheRuntime) {
  const auto chosen = std::make_shared<MarkModel>(1.0f), runtime = std::make_shared<MarkModel>(2.0f);
  BatchRoutePlan plan{{1, 3}, 1, 1};
  plan.max_gap_ms = 50.0;
  const auto route = xnnpack_batch_route({chosen, runtime, chosen}, plan);
  const device::CallerOpenMpThreads one(1);
  const torch::Tensor single = torch::rand({1, 3});
  EXPECT_EQ(mark_of(*route, single), 1.0f);  // nothing before it
  EXPECT_EQ(mark_of(*route, single), 2.0f);
  EXPECT_EQ(mark_of(*route, single), 2.0f);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_EQ(mark_of(*route, single), 1.0f);  // after a pause
  EXPECT_EQ(mark_of(*route, single), 2.0f);
  EXPECT_EQ(mark_of(*route, torch::rand({2, 3})), 1.0f);  // another size: the chosen engine, and a call
  EXPECT_EQ(mark_of(*route, single), 2.0f);
}

// The depthwise model saved as TorchScript, a batch of 8 and PyTorch's answers for it ([8, 4]).
struct DepthwiseCase {
  testing::TempDir dir;
  torch::Tensor batch = torch::rand({8, 1, 12, 12});
  torch::Tensor expected;
  DepthwiseCase() {
    depthwise_module().save(dir.file("depthwise.pt"));
    torch::jit::Module reference = torch::jit::load(dir.file("depthwise.pt"));
    reference.eval();
    torch::NoGradGuard no_grad;
    expected = reference.forward({batch}).toTensor();
  }
};

// Forced (--fp32-engine xnnpack) the timed batch runs on XNNPACK's runtime once checked; timed (auto) it is
// measured against the chosen engine on the same threads and recorded. Either way the answers at that batch
// size, at others and with a NaN are eager's, and on one thread too (a re-planned server's shrunk plan,
// RunOptions::replanned_threads: the chosen engine while a runtime for one thread is built, then that).
TEST(BatchedXnnpack, ForcedOrTimedTheRoutedBatchAnswersAsEager) {
  if (!xnnpack_runtime_available()) GTEST_SKIP() << "built without XNNPACK";
  const DepthwiseCase saved;
  const testing::TempDir& dir = saved.dir;
  const torch::Tensor &batch = saved.batch, &expected = saved.expected;
  torch::NoGradGuard no_grad;
  torch::Tensor with_nan = batch.clone();
  with_nan[3][0][6][6] = NAN;
  for (const Fp32Engine engine : {Fp32Engine::xnnpack, Fp32Engine::auto_select}) {
    SCOPED_TRACE(choice_name(engine));
    LoadOptions options = depthwise_options(engine, 8);
    options.run.pool_threads = 2;
    options.run.replanned_threads = true;
    const InferenceModelPtr model = load_inference_model(dir.file("depthwise.pt"), options);
    ASSERT_TRUE(model->fp32_engine);
    const Fp32EngineChoice& choice = *model->fp32_engine;
    EXPECT_EQ(choice.batch, 8);
    if (choice.batch_engine == Fp32Engine::xnnpack) {
      EXPECT_NE(choice.reason.find("; a runtime for fewer threads is built when the plan shrinks"),
                std::string::npos)
          << choice.reason;
    }
    EXPECT_EQ(choice.batch_xnnpack_threads, 2) << choice.reason;
    const Json json = to_json(choice);
    EXPECT_EQ(json["batch_engine"], choice_name(choice.batch_engine));
    EXPECT_EQ(json["batch_xnnpack_threads"], 2);
    if (engine == Fp32Engine::xnnpack) {
      EXPECT_EQ(choice.batch_engine, Fp32Engine::xnnpack) << choice.reason;
      EXPECT_EQ(choice.batch_xnnpack_ms, 0.0);      // checked, not timed
      EXPECT_EQ(choice.batch_xnnpack_min_rows, 8);  // no padding
      EXPECT_NE(choice.reason.find("; batch 8 on XNNPACK runtime (checked, 2 thread(s))"), std::string::npos)
          << choice.reason;
    } else {
      EXPECT_GT(choice.batch_xnnpack_ms, 0.0) << choice.reason;
      EXPECT_NE(choice.reason.find(" runtime at batch 8 "), std::string::npos) << choice.reason;
      if (choice.batch_engine != Fp32Engine::xnnpack && choice.batch_engine != Fp32Engine::onednn) {
        EXPECT_EQ(choice.batch_engine, choice.engine);
        EXPECT_EQ(choice.batch_xnnpack_min_rows, 0);
      } else {
        EXPECT_GE(choice.batch_xnnpack_min_rows, 1);
        EXPECT_LE(choice.batch_xnnpack_min_rows, 8);
      }
      EXPECT_EQ(json["batch_xnnpack_min_rows"], choice.batch_xnnpack_min_rows);
      // batch 8 on 2 threads: one runtime on the pool, the rows split in two and oneDNN's timed, the fastest
      // kept
      EXPECT_NE(choice.reason.find("; XNNPACK on a pool of 2 "), std::string::npos) << choice.reason;
      EXPECT_NE(choice.reason.find(", XNNPACK rows split across 2 one-thread runtimes "), std::string::npos)
          << choice.reason;
      if (onednn_runtime_available()) {
        EXPECT_GT(choice.batch_onednn_ms, 0.0) << choice.reason;
        EXPECT_NE(choice.reason.find(", oneDNN "), std::string::npos) << choice.reason;
      }
      EXPECT_EQ(json["batch_onednn_ms"], choice.batch_onednn_ms);
      EXPECT_TRUE(choice.batch_xnnpack_row_parts == 0 || choice.batch_xnnpack_row_parts == 2);
    }
    if (engine == Fp32Engine::xnnpack) {
      EXPECT_EQ(choice.batch_xnnpack_row_parts, 0);  // the pool, checked
    }
    EXPECT_EQ(json["batch_xnnpack_row_parts"], choice.batch_xnnpack_row_parts);
    const device::CallerOpenMpThreads two(2);
    const std::uint64_t calls_before = xnnpack_runtime_calls();
    EXPECT_LT((model->forward(batch) - expected).abs().max().item<double>(), 1e-4);
    // the route's first full batch: on XNNPACK's runtime where forced or timed faster, else not. Timed, the
    // race probes the other engine from 1 s after the route was made: on a busy machine the rest of the load
    // can take that long, and the first call is then the probe's (CI, 12-07)
    const std::uint64_t calls = xnnpack_runtime_calls() - calls_before;
    if (engine == Fp32Engine::xnnpack || choice.batch_engine != Fp32Engine::xnnpack)
      EXPECT_EQ(calls, choice.batch_engine == Fp32Engine::xnnpack ? 1u : 0u);
    else
      EXPECT_LE(calls, 1u);
    for (const std::int64_t rows : {1, 5, 7})  // padded where min_rows allows it, else the chosen engine
      EXPECT_LT(
          (model->forward(batch.narrow(0, 0, rows)) - expected.narrow(0, 0, rows)).abs().max().item<double>(),
          1e-4)
          << rows << " rows";
    EXPECT_TRUE(model->forward(with_nan)[3].isnan().all().item<bool>());  // the NaN spreads, as in eager
    const device::CallerOpenMpThreads one(1);
    const int blas_before = device::blas_thread_count();
    device::set_blas_threads(1);
    for (int call = 0; call < 30; ++call) {  // the first starts the build; it lands within these
      EXPECT_LT((model->forward(batch) - expected).abs().max().item<double>(), 1e-4) << "call " << call;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (blas_before > 0) device::set_blas_threads(blas_before);
  }
}

// --fp32-engine onednn: the frozen graph, its batch size on oneDNN's runtime once checked; the answers as
// eager's, partial batches and NaNs included.
TEST(BatchedXnnpack, ForcedOnednnRunsTheBatchOnItsRuntimeAndAnswersAsEager) {
  if (!onednn_runtime_available()) GTEST_SKIP() << "built without oneDNN";
  const DepthwiseCase saved;
  const testing::TempDir& dir = saved.dir;
  const torch::Tensor &batch = saved.batch, &expected = saved.expected;
  torch::NoGradGuard no_grad;
  LoadOptions options = depthwise_options(Fp32Engine::onednn, 8);
  options.run.pool_threads = 2;
  const InferenceModelPtr model = load_inference_model(dir.file("depthwise.pt"), options);
  ASSERT_TRUE(model->fp32_engine);
  const Fp32EngineChoice& choice = *model->fp32_engine;
  EXPECT_EQ(choice.requested, Fp32Engine::onednn);
  EXPECT_NE(choice.engine, Fp32Engine::onednn) << choice.reason;  // frozen, or eager where frozen differed
  EXPECT_EQ(choice.batch_engine, Fp32Engine::onednn) << choice.reason;
  EXPECT_NE(choice.reason.find("; batch 8 on oneDNN's runtime (checked), as asked"), std::string::npos)
      << choice.reason;
  EXPECT_EQ(choice.reason.find("frozen, as asked"), std::string::npos) << choice.reason;  // onednn was
  const bool worded_by_request = choice.reason.rfind("frozen for other batch sizes", 0) == 0 ||
                                 choice.reason.rfind("eager: frozen (for other batch sizes)", 0) == 0;
  EXPECT_TRUE(worded_by_request) << choice.reason;
  // A TorchScript file without --input-shape: a usage error naming the flag
  LoadOptions no_shape = options;
  no_shape.inputs.input_shape.clear();
  try {
    load_inference_model(dir.file("depthwise.pt"), no_shape);
    ADD_FAILURE() << "forced onednn ran without a sample shape";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::usage);
    EXPECT_NE(std::string(error.what()).find("--input-shape"), std::string::npos) << error.what();
  }
  EXPECT_EQ(to_json(choice)["batch_engine"], "onednn");
  const device::CallerOpenMpThreads two(2);
  // oneDNN's runtimes count the calls they answer: the batch size's and batch 1's, not a partial batch's
  const std::uint64_t counted = onednn_runtime_calls();
  model->forward(batch);
  EXPECT_EQ(onednn_runtime_calls(), counted + 1);
  model->forward(batch.narrow(0, 0, 5));
  EXPECT_EQ(onednn_runtime_calls(), counted + 1);
  model->forward(batch.narrow(0, 0, 1));
  EXPECT_EQ(onednn_runtime_calls(), counted + 2);
  {
    const UncountedRuntimeCalls uncounted;  // load-time checks, a server's warm-up
    model->forward(batch);
  }
  EXPECT_EQ(onednn_runtime_calls(), counted + 2);
  EXPECT_LT((model->forward(batch) - expected).abs().max().item<double>(), 1e-4);
  EXPECT_LT((model->forward(batch.narrow(0, 0, 5)) - expected.narrow(0, 0, 5)).abs().max().item<double>(),
            1e-4);
  torch::Tensor with_nan = batch.clone();
  with_nan[3][0][6][6] = NAN;
  EXPECT_TRUE(model->forward(with_nan)[3].isnan().all().item<bool>());
  // batch 1 on its one-thread oneDNN runtime too, as eager answers (a NaN sample too)
  EXPECT_EQ(choice.batch1_engine, Fp32Engine::onednn) << choice.reason;
  EXPECT_EQ(choice.batch1_threads, 1);
  EXPECT_NE(choice.reason.find("; batch 1 on oneDNN's runtime on the calling thread (checked), as asked"),
            std::string::npos)
      << choice.reason;
  EXPECT_EQ(to_json(choice)["batch1_engine"], "onednn");
  for (const std::int64_t row : {0, 5})
    EXPECT_LT(
        (model->forward(batch.narrow(0, row, 1)) - expected.narrow(0, row, 1)).abs().max().item<double>(),
        1e-4)
        << "row " << row;
  EXPECT_TRUE(model->forward(with_nan.narrow(0, 3, 1)).isnan().all().item<bool>());
  // a run of batch 1 alone: that size on the one-thread runtime, no batch route
  LoadOptions batch1_only = options;
  batch1_only.run.fp32_engine_batch = 1;
  const InferenceModelPtr single = load_inference_model(dir.file("depthwise.pt"), batch1_only);
  ASSERT_TRUE(single->fp32_engine);
  EXPECT_EQ(single->fp32_engine->batch1_engine, Fp32Engine::onednn) << single->fp32_engine->reason;
  EXPECT_EQ(single->fp32_engine->batch_engine, single->fp32_engine->engine) << single->fp32_engine->reason;
  EXPECT_LT((single->forward(batch.narrow(0, 2, 1)) - expected.narrow(0, 2, 1)).abs().max().item<double>(),
            1e-4);
}

}  // namespace
}  // namespace ipj::infer
