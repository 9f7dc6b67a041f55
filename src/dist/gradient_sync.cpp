// c10d::Reducer set up as DistributedDataParallel does it: bucket assignment by size over the parameters in
// order, buckets reversed so the last layers (whose gradients are ready first in backward) go first, no
// unused-parameter search, gradients copied to and from the buckets.
#include "ipj/dist/gradient_sync.hpp"

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/reducer.hpp>

#include <algorithm>

#include "ipj/core/error.hpp"
#include "ipj/core/torch_compat.hpp"
#include "ipj/dist/process_group.hpp"

namespace ipj::dist {
namespace {

// Every rank must train the same parameters: compares (count, total elements, shapes hash) across ranks.
void check_same_parameters(ProcessGroupContext& context, const std::vector<torch::Tensor>& parameters) {
  double elements = 0.0, shape_code = 0.0;
  for (std::size_t index = 0; index < parameters.size(); ++index) {
    elements += static_cast<double>(parameters[index].numel());
    for (const auto size : parameters[index].sizes())
      shape_code += static_cast<double>(size) * static_cast<double>((index % 97) + 1);
  }
  const std::vector<double> mine{static_cast<double>(parameters.size()), elements, shape_code};
  const std::vector<double> summed = context.all_reduce_sum(mine);
  for (std::size_t index = 0; index < mine.size(); ++index)
    if (summed[index] != mine[index] * context.world_size())
      fail(ErrorCategory::invalid_input,
           "--distributed: the ranks train different models (parameter count/shapes differ from the other "
           "ranks' on rank " +
               std::to_string(context.rank()) +
               "); start every rank with the same --model and --input-shape");
}

}  // namespace

GradientSynchronizer::GradientSynchronizer(ProcessGroupContext& context,
                                           std::vector<torch::Tensor> parameters, std::int64_t bucket_bytes,
                                           std::int64_t first_bucket_bytes) {
  if (parameters.empty())
    fail(ErrorCategory::invalid_input, "--distributed: the model has no trainable parameters");
  check_same_parameters(context, parameters);
  auto [bucket_indices, bucket_limits] = c10d::compute_bucket_assignment_by_size(
      parameters, {static_cast<std::size_t>(first_bucket_bytes), static_cast<std::size_t>(bucket_bytes)},
      std::vector<bool>(parameters.size(), false));
  std::reverse(bucket_indices.begin(), bucket_indices.end());
  std::reverse(bucket_limits.begin(), bucket_limits.end());
  bucket_count_ = bucket_indices.size();
  reducer_ = compat::make_reducer<c10d::Reducer>(std::move(parameters), std::move(bucket_indices),
                                                 std::move(bucket_limits), context.group(), bucket_bytes,
                                                 first_bucket_bytes);
}

GradientSynchronizer::~GradientSynchronizer() = default;

void GradientSynchronizer::prepare_for_backward() {
  reducer_->prepare_for_backward({});
}

}  // namespace ipj::dist
