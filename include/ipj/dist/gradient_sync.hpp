// Gradient averaging for data-parallel training through LibTorch's own c10d::Reducer (the engine under
// PyTorch's DistributedDataParallel): parameters grouped into buckets (1 MB first, 25 MB after, last layers
// first), each bucket all-reduced as soon as its gradients are ready during the backward pass, divided by the
// world size. Accumulation steps skip prepare_for_backward, like DDP's no_sync().
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace c10d {
class Reducer;
}

namespace ipj::dist {

class ProcessGroupContext;

class GradientSynchronizer {
 public:
  // `parameters`: the model's trainable parameters, identical in shape and order on every rank (checked
  // across ranks: a mismatch throws ipj::Error(invalid_input)).
  GradientSynchronizer(ProcessGroupContext& context, std::vector<torch::Tensor> parameters,
                       std::int64_t bucket_bytes = 25 << 20, std::int64_t first_bucket_bytes = 1 << 20);
  ~GradientSynchronizer();
  GradientSynchronizer(const GradientSynchronizer&) = delete;
  GradientSynchronizer& operator=(const GradientSynchronizer&) = delete;

  // Call after the forward pass and before backward() of a step whose gradients must be averaged (the last
  // micro-batch of an accumulation group); backward() then all-reduces bucket by bucket.
  void prepare_for_backward();
  std::size_t bucket_count() const { return bucket_count_; }

 private:
  std::unique_ptr<c10d::Reducer> reducer_;
  std::size_t bucket_count_ = 0;
};

}  // namespace ipj::dist
