// Broadcast and averaging of a module's tensors through the process group, one flat tensor per dtype so that
// a model costs a few collectives rather than one per tensor.
#include "ipj/dist/module_sync.hpp"

#include <torch/torch.h>

#include <map>

#include "ipj/dist/process_group.hpp"

namespace ipj::dist {
namespace {

// Copies `tensors` into one flat buffer per dtype, runs `collective` on each, and copies the results back.
void for_each_flat(std::vector<torch::Tensor> tensors,
                   const std::function<void(std::vector<torch::Tensor>&, bool floating)>& collective) {
  std::map<c10::ScalarType, std::vector<torch::Tensor>> by_type;
  for (auto& tensor : tensors)
    if (tensor.defined() && tensor.numel() > 0) by_type[tensor.scalar_type()].push_back(tensor);
  torch::NoGradGuard no_grad;
  for (auto& [type, group] : by_type) {
    std::vector<torch::Tensor> flat_parts;
    for (const auto& tensor : group)
      flat_parts.push_back(tensor.reshape({-1}));
    std::vector<torch::Tensor> flat{torch::cat(flat_parts)};  // [total elements]
    collective(flat, c10::isFloatingType(type));
    std::int64_t offset = 0;
    for (auto& tensor : group) {
      tensor.copy_(flat[0].narrow(0, offset, tensor.numel()).view(tensor.sizes()));
      offset += tensor.numel();
    }
  }
}

}  // namespace

void broadcast_module_state(ProcessGroupContext& context, torch::nn::Module& module) {
  std::vector<torch::Tensor> tensors = module.parameters();
  for (auto& buffer : module.buffers())
    tensors.push_back(buffer);
  for_each_flat(tensors,
                [&](std::vector<torch::Tensor>& flat, bool) { context.broadcast_from_primary(flat); });
}

void average_module_buffers(ProcessGroupContext& context, torch::nn::Module& module) {
  for_each_flat(module.buffers(), [&](std::vector<torch::Tensor>& flat, bool floating) {
    if (!floating) {
      context.broadcast_from_primary(flat);
      return;
    }
    context.all_reduce_sum(flat);
    flat[0].div_(context.world_size());
  });
}

}  // namespace ipj::dist
