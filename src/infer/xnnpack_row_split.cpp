// A batch's rows split across one-thread XNNPACK runtimes run at once (xnnpack_row_split_model): one
// hand-off per call where a runtime on a pool waits for its workers at every operator. Limits: the slices'
// sizes are fixed when built; built only with IPJ_WITH_XNNPACK (pthreadpool).
#include <torch/types.h>

#include <exception>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "ipj/core/error.hpp"
#include "ipj/infer/xnnpack_runtime.hpp"

#ifdef IPJ_WITH_XNNPACK
#include <pthreadpool.h>

#include "xnnpack_planned_runtime.hpp"
#endif

namespace ipj::infer {

#ifdef IPJ_WITH_XNNPACK
namespace {

class RowSplitModel : public InferenceModel {
 public:
  RowSplitModel(std::vector<std::shared_ptr<const InferenceModel>> parts, std::vector<std::int64_t> rows,
                std::shared_ptr<const InferenceModel> busy)
      : parts_(std::move(parts)), rows_(std::move(rows)), busy_(std::move(busy)) {
    InferenceModel::operator=(*parts_.front());
    for (const std::int64_t count : rows_) {
      first_rows_.push_back(batch_);
      batch_ += count;
    }
    pool_ = pthreadpool_create(parts_.size());
    if (!pool_) fail(ErrorCategory::runtime, "XNNPACK row split: no thread pool could be made");
  }
  ~RowSplitModel() override { pthreadpool_destroy(pool_); }
  RowSplitModel(const RowSplitModel&) = delete;
  RowSplitModel& operator=(const RowSplitModel&) = delete;

  // input: [batch, ...sample] -> the slices' outputs, in order
  torch::Tensor forward(const torch::Tensor& input) const override {
    if (input.dim() < 1 || input.size(0) != batch_)
      fail(ErrorCategory::invalid_input, "XNNPACK row split: input of shape " +
                                             xnnpack::shape_text(input.sizes().vec()) +
                                             " where it was built for batch " + std::to_string(batch_));
    std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
    if (!lock.owns_lock()) {
      if (busy_) return busy_->forward(input);
      lock.lock();
    }
    Call call{this, &input, std::vector<torch::Tensor>(parts_.size()),
              std::vector<std::exception_ptr>(parts_.size())};
    // the workers sleep after the call instead of spinning through a million pauses
    pthreadpool_parallelize_1d(pool_, &RowSplitModel::run_slice, &call, parts_.size(),
                               PTHREADPOOL_FLAG_YIELD_WORKERS);
    for (const std::exception_ptr& error : call.errors)
      if (error) std::rethrow_exception(error);
    if (runtime_calls_counted_on_this_thread()) xnnpack::count_answered_call();
    return torch::cat(call.outputs);  // [batch, ...]
  }

 private:
  struct Call {
    const RowSplitModel* model;
    const torch::Tensor* input;
    std::vector<torch::Tensor> outputs;
    std::vector<std::exception_ptr> errors;
  };

  static void run_slice(void* context, std::size_t index) {
    Call& call = *static_cast<Call*>(context);
    try {
      torch::NoGradGuard no_grad;       // grad mode is per thread
      UncountedRuntimeCalls uncounted;  // the split call counts once, on the caller's thread
      const RowSplitModel& model = *call.model;
      call.outputs[index] =
          model.parts_[index]->forward(call.input->narrow(0, model.first_rows_[index], model.rows_[index]));
    } catch (...) {
      call.errors[index] = std::current_exception();
    }
  }

  std::vector<std::shared_ptr<const InferenceModel>> parts_;
  std::vector<std::int64_t> rows_;        // each slice's rows
  std::vector<std::int64_t> first_rows_;  // each slice's first row in the batch
  std::shared_ptr<const InferenceModel> busy_;
  std::int64_t batch_ = 0;
  pthreadpool_t pool_ = nullptr;
  mutable std::mutex mutex_;
};

}  // namespace
#endif

std::vector<std::int64_t> row_split_sizes(std::int64_t batch, int parts) {
  std::vector<std::int64_t> rows;
  if (parts < 1 || batch < parts) return rows;
  for (int part = 0; part < parts; ++part)
    rows.push_back(batch / parts + (part < batch % parts ? 1 : 0));
  return rows;
}

std::shared_ptr<InferenceModel> xnnpack_row_split_model(const RowRuntimeBuilder& build, std::int64_t batch,
                                                        int parts,
                                                        std::shared_ptr<const InferenceModel> busy) {
  const std::vector<std::int64_t> rows = row_split_sizes(batch, parts);
  if (parts < 2 || rows.empty())
    fail(ErrorCategory::invalid_input, "XNNPACK row split: " + std::to_string(batch) + " rows across " +
                                           std::to_string(parts) +
                                           " thread(s): a split needs at least 2 threads and a row for each");
#ifdef IPJ_WITH_XNNPACK
  std::vector<std::shared_ptr<const InferenceModel>> runtimes;
  for (const std::int64_t count : rows)
    runtimes.push_back(build(count));
  return std::make_shared<RowSplitModel>(std::move(runtimes), rows, std::move(busy));
#else
  (void)build;
  (void)busy;
  fail(ErrorCategory::unsupported, "XNNPACK row split: this build has no XNNPACK (IPJ_WITH_XNNPACK off)");
#endif
}

}  // namespace ipj::infer
