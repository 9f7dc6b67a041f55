// Batch formation and the worker threads of the dynamic batcher.
#include "ipj/serve/dynamic_batcher.hpp"

#include <algorithm>

#include "ipj/core/error.hpp"

namespace ipj::serve {
namespace {

bool same_sample_shape(const PendingRequest& a, const PendingRequest& b) {
  return a.shape.size() == b.shape.size() &&
         std::equal(a.shape.begin() + 1, a.shape.end(), b.shape.begin() + 1);
}

void fail_request(const RequestPtr& request, int status, const std::string& message, const char* reason) {
  Outcome outcome;
  outcome.status = status;
  outcome.error = message;
  outcome.reason = reason;
  request->complete(std::move(outcome));
}

}  // namespace

DynamicBatcher::DynamicBatcher(BatcherOptions options, BatchExecutor executor)
    : options_(std::move(options)), executor_(std::move(executor)) {
  if (options_.instances < 1) fail(ErrorCategory::usage, "instances must be >= 1");
  if (options_.max_batch_size < 0) fail(ErrorCategory::usage, "max_batch_size must be >= 0");
  send_size_ = options_.max_batch_size;
  if (!options_.preferred_batch_sizes.empty()) {
    const std::int64_t largest =
        *std::max_element(options_.preferred_batch_sizes.begin(), options_.preferred_batch_sizes.end());
    send_size_ = options_.max_batch_size > 0 ? std::min(largest, options_.max_batch_size) : largest;
  }
  for (int index = 0; index < options_.instances; ++index)
    workers_.emplace_back([this] { worker_loop(); });
}

DynamicBatcher::~DynamicBatcher() {
  stop();
}

DynamicBatcher::Admission DynamicBatcher::submit(const RequestPtr& request) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_) return Admission::stopped;
  if (options_.max_queue_size > 0 && queue_.size() >= options_.max_queue_size) return Admission::queue_full;
  request->enqueued = Clock::now();
  queue_.push_back(request);
  changed_.notify_all();
  return Admission::accepted;
}

void DynamicBatcher::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (std::thread& worker : workers_)
    if (worker.joinable()) worker.join();
  workers_.clear();
}

std::size_t DynamicBatcher::pending() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queue_.size();
}

std::vector<std::size_t> DynamicBatcher::candidate(bool& send_now, Clock::time_point now) const {
  std::vector<std::size_t> chosen;
  const PendingRequest& oldest = *queue_.front();
  if (options_.max_batch_size == 0) {  // no batching: the oldest request alone
    send_now = true;
    return {0};
  }
  std::int64_t rows = 0;
  bool full = false;
  for (std::size_t index = 0; index < queue_.size(); ++index) {
    const PendingRequest& request = *queue_[index];
    if (!same_sample_shape(request, oldest)) continue;  // equal shapes only; others wait for their own batch
    if (rows + request.rows() > options_.max_batch_size) {
      full = true;  // the next request would exceed the maximum: never split it
      break;
    }
    rows += request.rows();
    chosen.push_back(index);
  }
  const auto delay = std::chrono::microseconds(options_.max_queue_delay_us);
  send_now = full || rows >= send_size_ || options_.max_queue_delay_us == 0 || stopping_ ||
             now >= oldest.enqueued + delay;
  return chosen;
}

void DynamicBatcher::worker_loop() {
  for (;;) {
    std::vector<RequestPtr> batch;
    std::vector<RequestPtr> expired;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      for (;;) {
        if (queue_.empty()) {
          if (stopping_) return;
          changed_.wait(lock);
          continue;
        }
        const Clock::time_point now = Clock::now();
        // Requests whose own timeout passed while queued fail without running.
        for (auto it = queue_.begin(); it != queue_.end();) {
          if ((*it)->deadline <= now) {
            expired.push_back(*it);
            it = queue_.erase(it);
          } else {
            ++it;
          }
        }
        if (queue_.empty()) break;
        bool send_now = false;
        const std::vector<std::size_t> chosen = candidate(send_now, now);
        if (send_now) {
          for (auto index = chosen.rbegin(); index != chosen.rend(); ++index) {
            batch.insert(batch.begin(), queue_[*index]);
            queue_.erase(queue_.begin() + static_cast<std::ptrdiff_t>(*index));
          }
          break;
        }
        const Clock::time_point wake =
            queue_.front()->enqueued + std::chrono::microseconds(options_.max_queue_delay_us);
        changed_.wait_until(lock, wake);
      }
      if (!queue_.empty()) changed_.notify_all();  // another worker may form the next batch meanwhile
    }
    for (const RequestPtr& request : expired)
      fail_request(request, 503, "request timed out in the queue", "timeout");
    if (batch.empty()) continue;
    try {
      executor_(batch);
    } catch (const std::exception& error) {
      // Those the executor answered before it failed keep that answer.
      for (const RequestPtr& request : batch)
        if (!request->completed)
          fail_request(request, 500, std::string("batch execution failed: ") + error.what(), "internal");
    }
  }
}

}  // namespace ipj::serve
