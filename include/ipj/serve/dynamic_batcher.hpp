// Triton-style dynamic batcher, independent of HTTP and LibTorch: requests wait in a bounded FIFO queue;
// worker threads (one per model instance) form batches of equal-shaped requests, never splitting one, and
// send a batch when it reaches the largest preferred size, when the next request would exceed max_batch_size,
// or when the oldest request has waited max_queue_delay. Requests whose own timeout expires in the queue
// fail, unexecuted.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ipj/energy/measurement.hpp"

namespace ipj::serve {

using Clock = std::chrono::steady_clock;

struct BatcherOptions {
  std::int64_t max_batch_size = 64;  // rows per batch; 0 = the model does not batch (one request at a time)
  std::vector<std::int64_t> preferred_batch_sizes;
  std::int64_t max_queue_delay_us = 0;
  std::size_t max_queue_size = 1024;  // waiting requests; 0 = unbounded
  int instances = 1;                  // worker threads, each running whole batches
};

struct Outcome {
  int status = 200;    // HTTP status: 200, or 503 (timeout / shutting down), 500 (execution failed)
  std::string error;   // when status != 200
  std::string reason;  // when status != 200: the failure reason of the metrics (timeout, internal, ...)
  std::vector<float> output;
  std::vector<std::int64_t> output_shape;  // [rows, ...]
  double queue_us = 0.0;                   // enqueue -> batch formed
  double compute_us = 0.0;                 // the batch's execution
  std::int64_t batch_rows = 0;
  double energy_j = 0.0;                 // this request's share of its batch's energy
  energy::ReportedSource energy_source;  // none: the server measures no energy
};

struct PendingRequest {
  std::vector<std::int64_t> shape;  // [rows, ...]: rows is the batch dimension
  std::vector<float> data;          // row-major values of `shape`
  Clock::time_point enqueued{};
  Clock::time_point deadline = Clock::time_point::max();  // from the request's timeout parameter
  std::promise<Outcome> promise;                          // fulfilled unless on_complete is set
  std::function<void(Outcome&&)> on_complete;             // else called once, on the worker thread
  bool completed = false;
  std::int64_t rows() const { return shape.empty() ? 1 : shape[0]; }
  // Delivers the outcome (callback or promise) once; false when it was delivered already.
  bool complete(Outcome&& outcome) {
    if (completed) return false;
    completed = true;
    if (on_complete)
      on_complete(std::move(outcome));
    else
      promise.set_value(std::move(outcome));
    return true;
  }
};
using RequestPtr = std::shared_ptr<PendingRequest>;

// Runs one batch: must fulfil every request's promise (the batcher catches exceptions and fails the batch).
using BatchExecutor = std::function<void(std::vector<RequestPtr>& batch)>;

class DynamicBatcher {
 public:
  enum class Admission { accepted, queue_full, stopped };

  DynamicBatcher(BatcherOptions options, BatchExecutor executor);
  ~DynamicBatcher();
  DynamicBatcher(const DynamicBatcher&) = delete;
  DynamicBatcher& operator=(const DynamicBatcher&) = delete;

  // Queues a request (sets its enqueue time). Does not block on execution.
  Admission submit(const RequestPtr& request);
  // Stops accepting, lets the workers finish what is queued and joins them.
  void stop();
  std::size_t pending() const;
  const BatcherOptions& options() const { return options_; }

 private:
  void worker_loop();
  // Under mutex_: the requests of the next batch (indices into queue_), and whether to send it now.
  std::vector<std::size_t> candidate(bool& send_now, Clock::time_point now) const;

  BatcherOptions options_;
  BatchExecutor executor_;
  std::int64_t send_size_ = 0;  // rows at which a batch goes at once
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<RequestPtr> queue_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace ipj::serve
