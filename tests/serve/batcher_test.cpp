// The dynamic batcher without HTTP: batch formation at the preferred size, the queue-delay bound, never
// splitting a request, equal shapes only, bounded queue, per-request timeouts and executor failures.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "ipj/serve/dynamic_batcher.hpp"
#include "ipj/serve/served_model.hpp"

namespace ipj::serve {
namespace {

RequestPtr make_request(std::vector<std::int64_t> shape) {
  auto request = std::make_shared<PendingRequest>();
  std::int64_t count = 1;
  for (auto dim : shape)
    count *= dim;
  request->shape = std::move(shape);
  request->data.assign(static_cast<std::size_t>(count), 1.0f);
  return request;
}

// Records each batch's row count and answers every request with 200.
struct Recorder {
  std::mutex mutex;
  std::vector<std::int64_t> batch_rows;
  BatchExecutor executor() {
    return [this](std::vector<RequestPtr>& batch) {
      std::int64_t rows = 0;
      for (auto& request : batch)
        rows += request->rows();
      {
        std::lock_guard<std::mutex> lock(mutex);
        batch_rows.push_back(rows);
      }
      for (auto& request : batch) {
        Outcome outcome;
        outcome.batch_rows = rows;
        request->promise.set_value(outcome);
      }
    };
  }
};

double elapsed_ms(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

TEST(DynamicBatcher, SendsAtThePreferredSizeWithoutWaitingForTheDelay) {
  Recorder recorder;
  BatcherOptions options;
  options.max_batch_size = 8;
  options.preferred_batch_sizes = {4};
  options.max_queue_delay_us = 2'000'000;  // 2 s: a batch sent early proves the preferred size triggered it
  DynamicBatcher batcher(options, recorder.executor());
  std::vector<std::future<Outcome>> futures;
  const auto start = Clock::now();
  for (int index = 0; index < 4; ++index) {
    auto request = make_request({1, 3});
    futures.push_back(request->promise.get_future());
    ASSERT_EQ(batcher.submit(request), DynamicBatcher::Admission::accepted);
  }
  for (auto& future : futures)
    EXPECT_EQ(future.get().batch_rows, 4);
  EXPECT_LT(elapsed_ms(start), 1000.0);
  EXPECT_EQ(recorder.batch_rows, (std::vector<std::int64_t>{4}));
}

TEST(DynamicBatcher, ALoneRequestWaitsAtMostTheQueueDelay) {
  Recorder recorder;
  BatcherOptions options;
  options.max_batch_size = 8;
  options.max_queue_delay_us = 30'000;
  DynamicBatcher batcher(options, recorder.executor());
  auto request = make_request({1, 3});
  auto future = request->promise.get_future();
  const auto start = Clock::now();
  batcher.submit(request);
  EXPECT_EQ(future.get().batch_rows, 1);
  const double waited = elapsed_ms(start);
  EXPECT_GE(waited, 29.0);
  EXPECT_LT(waited, 500.0);  // generous for a loaded CI machine; the bound itself is the lower check above
}

TEST(DynamicBatcher, NeverSplitsARequestAndBatchesOnlyEqualShapes) {
  Recorder recorder;
  BatcherOptions options;
  options.max_batch_size = 4;
  options.max_queue_delay_us = 50'000;
  options.instances = 1;
  DynamicBatcher batcher(options, recorder.executor());
  std::vector<RequestPtr> requests{make_request({3, 2}), make_request({2, 2}), make_request({1, 5}),
                                   make_request({1, 2})};
  std::vector<std::future<Outcome>> futures;
  for (auto& request : requests)
    futures.push_back(request->promise.get_future());
  for (auto& request : requests)
    batcher.submit(request);
  std::vector<std::int64_t> rows;
  for (auto& future : futures)
    rows.push_back(future.get().batch_rows);
  // [3,2] goes alone: the next request in order ([2,2]) would exceed 4 rows and is never split. [2,2] and
  // [1,2] then form a batch of 3 at the delay; [1,5] has another sample shape and runs in its own batch.
  EXPECT_EQ(rows, (std::vector<std::int64_t>{3, 3, 1, 3}));
}

TEST(DynamicBatcher, FullQueueRefusesAndTimeoutsFailUnexecuted) {
  std::atomic<int> executed{0};
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  BatcherOptions options;
  options.max_batch_size = 1;
  options.max_queue_size = 2;
  DynamicBatcher batcher(options, [&](std::vector<RequestPtr>& batch) {
    released.wait();  // holds the only worker
    executed += static_cast<int>(batch.size());
    for (auto& request : batch)
      request->promise.set_value(Outcome{});
  });
  auto first = make_request({1, 1});
  auto first_future = first->promise.get_future();
  batcher.submit(first);
  while (batcher.pending() != 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // worker took it
  auto timed = make_request({1, 1});
  timed->deadline = Clock::now() + std::chrono::milliseconds(5);
  auto timed_future = timed->promise.get_future();
  auto third = make_request({1, 1});
  auto third_future = third->promise.get_future();
  EXPECT_EQ(batcher.submit(timed), DynamicBatcher::Admission::accepted);
  EXPECT_EQ(batcher.submit(third), DynamicBatcher::Admission::accepted);
  EXPECT_EQ(batcher.submit(make_request({1, 1})), DynamicBatcher::Admission::queue_full);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  release.set_value();
  EXPECT_EQ(first_future.get().status, 200);
  const Outcome timed_out = timed_future.get();
  EXPECT_EQ(timed_out.status, 503);
  EXPECT_NE(timed_out.error.find("timed out"), std::string::npos);
  EXPECT_EQ(third_future.get().status, 200);
  EXPECT_EQ(executed.load(), 2);
  batcher.stop();
  EXPECT_EQ(batcher.submit(make_request({1, 1})), DynamicBatcher::Admission::stopped);
}

TEST(DynamicBatcher, ExecutorFailureAnswersEveryRequestWith500) {
  BatcherOptions options;
  options.max_batch_size = 4;
  options.preferred_batch_sizes = {2};
  options.max_queue_delay_us = 1'000'000;
  DynamicBatcher batcher(options,
                         [](std::vector<RequestPtr>&) { throw std::runtime_error("kernel exploded"); });
  auto a = make_request({1, 1}), b = make_request({1, 1});
  auto fa = a->promise.get_future(), fb = b->promise.get_future();
  batcher.submit(a);
  batcher.submit(b);
  for (auto* future : {&fa, &fb}) {
    const Outcome outcome = future->get();
    EXPECT_EQ(outcome.status, 500);
    EXPECT_NE(outcome.error.find("kernel exploded"), std::string::npos);
  }
}

TEST(DynamicBatcher, ConcurrentProducersFormLargeBatchesAndEveryRequestIsAnswered) {
  Recorder recorder;
  BatcherOptions options;
  options.max_batch_size = 16;
  options.preferred_batch_sizes = {16};
  options.max_queue_delay_us = 20'000;
  options.instances = 2;
  DynamicBatcher batcher(options, recorder.executor());
  std::atomic<int> answered{0};
  std::vector<std::thread> producers;
  for (int thread = 0; thread < 16; ++thread) {
    producers.emplace_back([&] {
      for (int index = 0; index < 20; ++index) {
        auto request = make_request({1, 4});
        auto future = request->promise.get_future();
        while (batcher.submit(request) != DynamicBatcher::Admission::accepted)
          std::this_thread::yield();
        if (future.get().status == 200) ++answered;
      }
    });
  }
  for (auto& producer : producers)
    producer.join();
  EXPECT_EQ(answered.load(), 320);
  std::int64_t rows = 0;
  for (auto size : recorder.batch_rows) {
    rows += size;
    EXPECT_LE(size, 16);
  }
  EXPECT_EQ(rows, 320);
  // 16 closed-loop producers and a 20 ms window: batches average well above one request
  EXPECT_GT(320.0 / static_cast<double>(recorder.batch_rows.size()), 4.0);
}

TEST(EnergyLedger, ChargesEachBatchTheJoulesSinceThePreviousOneExactly) {
  std::vector<double> totals{10.0, 15.0, 15.0, 22.5,
                             22.0};  // cumulative readings; the last one glitches back
  std::size_t next = 0;
  EnergyLedger ledger([&] { return EnergyLedger::Reading{totals[next++], energy::EnergySource::counter}; });
  std::vector<double> charged;
  for (int batch = 0; batch < 5; ++batch)
    charged.push_back(ledger.take().total_j);
  EXPECT_EQ(charged,
            (std::vector<double>{10.0, 5.0, 0.0, 7.5, 0.0}));  // never negative, sums to what was seen
  EnergyLedger none(nullptr);
  EXPECT_EQ(none.take().source, std::nullopt);
}

}  // namespace
}  // namespace ipj::serve

namespace ipj::serve {
namespace {

TEST(EnergyLedger, ExtrapolatesBetweenSamplesAndGivesEachBatchItsOwnShare) {
  // Samples at 0.1 s intervals of a steady 50 W: 5 J at 0.1 s, 10 J at 0.2 s, ...
  double sample_time = 0.1;
  EnergyLedger ledger([&] {
    return EnergyLedger::Reading{50.0 * sample_time, energy::EnergySource::estimated, sample_time};
  });
  EXPECT_DOUBLE_EQ(ledger.take_at(0.1, 0.001).total_j, 5.0);
  EXPECT_NEAR(ledger.take_at(0.1, 0.001).busy_j, 0.05, 1e-12);  // average power since the start x 1 ms
  sample_time = 0.2;
  EXPECT_NEAR(ledger.take_at(0.2, 0.002).total_j, 5.0, 1e-9);
  // Between samples the ledger extrapolates at the last power: batches in between get energy too, instead
  // of one batch per sampling period getting all of it.
  double charged = 0.0;
  for (const double now : {0.22, 0.24, 0.26, 0.28}) {
    const auto reading = ledger.take_at(now, 0.004);
    EXPECT_NEAR(reading.total_j, 1.0, 1e-9) << now;
    EXPECT_NEAR(reading.busy_j, 0.2, 1e-9) << now;  // 50 W x 4 ms
    charged += reading.total_j;
  }
  sample_time = 0.3;  // the next sample: the total catches up exactly, never counted twice
  charged += ledger.take_at(0.3, 0.0).total_j;
  EXPECT_NEAR(charged, 5.0, 1e-9);
}

}  // namespace
}  // namespace ipj::serve

namespace ipj::serve {
namespace {

// Issue 22: what the meters counted beyond the batches' own energy is idle energy, kept apart (the answers
// and the per-model totals carry only the busy part); busy + idle = what the meters saw.
TEST(EnergyLedger, KeepsTheEnergyBetweenBatchesApartAsIdle) {
  double sample_time = 0.1;  // a steady 50 W, sampled every 0.1 s
  EnergyLedger ledger([&] {
    return EnergyLedger::Reading{50.0 * sample_time, energy::EnergySource::estimated, sample_time};
  });
  double busy = ledger.take_at(0.1, 0.01).busy_j;  // 5 J seen: 0.5 J in the 10 ms batch, 4.5 J idle
  sample_time = 0.2;
  busy += ledger.take_at(0.2, 0.02).busy_j;  // 5 J more: 1 J busy, 4 J idle
  EXPECT_NEAR(busy, 1.5, 1e-9);
  const EnergyLedger::Reading idle = ledger.idle_at(0.2);
  EXPECT_NEAR(idle.total_j, 8.5, 1e-9);
  EXPECT_EQ(idle.source, energy::EnergySource::estimated);
  sample_time = 0.3;  // no batch for 0.1 s: a scrape adds the idle time up to now
  EXPECT_NEAR(ledger.idle_at(0.3).total_j, 13.5, 1e-9);
  EXPECT_NEAR(busy + ledger.idle_at(0.3).total_j, 15.0, 1e-9);  // nothing counted twice
  EXPECT_EQ(EnergyLedger(nullptr).idle().total_j, 0.0);
}

}  // namespace
}  // namespace ipj::serve
