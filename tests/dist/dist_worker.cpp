// A rank of the dist tests, started by `ipj launch` with the torchrun variables: runs one scenario and exits
// 0 when its checks hold (non-zero with a message otherwise).
//   allreduce: sums of tensors and numbers over ranks, broadcast from rank 0.
//   reducer:   a linear model on a fixed global batch split over the ranks; the averaged gradients must equal
//              the full batch's gradient computed locally.
//   join:      only joins the job (for rendezvous timeout tests).
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <iostream>
#include <string>

#include "ipj/core/error.hpp"
#include "ipj/dist/gradient_sync.hpp"
#include "ipj/dist/module_sync.hpp"
#include "ipj/dist/process_group.hpp"

namespace {

int check(bool condition, const std::string& what) {
  if (!condition) std::cerr << "check failed: " << what << std::endl;
  return condition ? 0 : 1;
}

int run_allreduce(ipj::dist::ProcessGroupContext& context) {
  const int world = context.world_size(), rank = context.rank();
  std::vector<torch::Tensor> tensors{torch::full({1000}, static_cast<float>(rank + 1))};
  context.all_reduce_sum(tensors);
  const float expected = static_cast<float>(world * (world + 1) / 2);
  int failures = check(tensors[0].eq(expected).all().item<bool>(), "tensor sum");
  const std::vector<double> sums = context.all_reduce_sum({1.0, 0.5 * rank});
  failures += check(sums[0] == world, "count sum");
  std::vector<torch::Tensor> broadcast{torch::full({3}, static_cast<float>(rank * 10 + 7))};
  context.broadcast_from_primary(broadcast);
  failures += check(broadcast[0].eq(7.0f).all().item<bool>(), "broadcast from rank 0");
  return failures;
}

int run_reducer(ipj::dist::ProcessGroupContext& context) {
  const int world = context.world_size(), rank = context.rank();
  torch::manual_seed(3);
  torch::nn::Linear model(6, 4);
  const torch::Tensor inputs = torch::randn({8 * world, 6});                     // the global batch
  const torch::Tensor labels = torch::randint(0, 4, {8 * world}, torch::kLong);  // [8 * world]
  // Reference: the full batch's mean loss gradient, on this process alone.
  torch::nn::Linear reference(6, 4);
  {
    torch::NoGradGuard no_grad;
    reference->weight.copy_(model->weight);
    reference->bias.copy_(model->bias);
  }
  torch::nn::functional::cross_entropy(reference(inputs), labels).backward();
  ipj::dist::GradientSynchronizer sync(context, model->parameters());
  int failures = 0;
  for (int step = 0; step < 2; ++step) {  // twice: buckets are reused across steps
    for (auto& parameter : model->parameters())
      parameter.mutable_grad() = torch::Tensor();
    const torch::Tensor shard = torch::arange(rank, 8 * world, world);  // DistributedSampler's interleave
    const torch::Tensor loss = torch::nn::functional::cross_entropy(model(inputs.index_select(0, shard)),
                                                                    labels.index_select(0, shard));
    sync.prepare_for_backward();
    loss.backward();
    failures += check(torch::allclose(model->weight.grad(), reference->weight.grad(), 1e-5, 1e-6),
                      "averaged weight gradient equals the full batch's (step " + std::to_string(step) + ")");
    failures += check(torch::allclose(model->bias.grad(), reference->bias.grad(), 1e-5, 1e-6),
                      "averaged bias gradient equals the full batch's");
  }
  return failures;
}

// BatchNorm on different data per rank: broadcast makes weights equal; averaging makes running stats the
// mean.
int run_module_sync(ipj::dist::ProcessGroupContext& context) {
  const int rank = context.rank();
  torch::manual_seed(100 + rank);  // different initial weights per rank
  torch::nn::Sequential model(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3)),
                              torch::nn::BatchNorm2d(4));
  ipj::dist::broadcast_module_state(context, *model);
  torch::manual_seed(100);
  torch::nn::Sequential rank0_model(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3)),
                                    torch::nn::BatchNorm2d(4));
  int failures = 0;
  for (std::size_t index = 0; index < model->parameters().size(); ++index)
    failures +=
        check(model->parameters()[index].equal(rank0_model->parameters()[index]), "weights are rank 0's");
  model->train();
  model->forward(torch::full({2, 1, 5, 5}, static_cast<float>(rank + 1)));  // running_mean moves differently
  const torch::Tensor mine = model->named_buffers()["1.running_mean"].clone();
  std::vector<torch::Tensor> summed{mine.clone()};
  context.all_reduce_sum(summed);
  ipj::dist::average_module_buffers(context, *model);
  failures +=
      check(torch::allclose(model->named_buffers()["1.running_mean"], summed[0] / context.world_size()),
            "running mean is the mean over ranks");
  failures +=
      check(model->named_buffers()["1.num_batches_tracked"].item<std::int64_t>() == 1, "counter kept");
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "allreduce";
  const int timeout_s = argc > 2 ? std::stoi(argv[2]) : 60;
  try {
    ipj::dist::ProcessGroupContext context(ipj::dist::read_distributed_environment(),
                                           ipj::dist::Backend::gloo, std::chrono::seconds(timeout_s));
    if (scenario == "allreduce") return run_allreduce(context);
    if (scenario == "reducer") return run_reducer(context);
    if (scenario == "module_sync") return run_module_sync(context);
    if (scenario == "join") return 0;
    std::cerr << "unknown scenario " << scenario << std::endl;
    return 2;
  } catch (const ipj::Error& error) {
    std::cerr << "ipj: error: " << error.what() << std::endl;
    return ipj::exit_code_for(error.category());
  }
}
