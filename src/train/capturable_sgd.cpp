// CapturableSgd: SGD with the learning rate in a tensor, sharing torch::optim::SGD's momentum state.
#include "ipj/train/capturable_sgd.hpp"

#include "ipj/core/error.hpp"
#include "ipj/core/torch_compat.hpp"

namespace ipj::train {

CapturableSgd::CapturableSgd(torch::optim::SGD& optimizer) : optimizer_(optimizer) {
  if (optimizer.param_groups().size() != 1)
    fail(ErrorCategory::internal, "CapturableSgd supports one parameter group, got " +
                                      std::to_string(optimizer.param_groups().size()));
  auto& group = optimizer.param_groups().front();
  const auto& options = static_cast<const torch::optim::SGDOptions&>(group.options());
  if (options.nesterov() || options.dampening() != 0.0)
    fail(ErrorCategory::unsupported,
         "CapturableSgd implements plain momentum SGD (no Nesterov, dampening 0)");
  momentum_ = options.momentum();
  weight_decay_ = options.weight_decay();
  parameters_ = group.params();
  if (parameters_.empty()) fail(ErrorCategory::internal, "CapturableSgd: the optimizer has no parameters");
  learning_rate_ = torch::full({}, options.lr(), parameters_.front().options().dtype(torch::kFloat32));
  for (const auto& parameter : parameters_) {
    torch::Tensor buffer;
    if (momentum_ != 0.0) {
      auto& state = optimizer.state();
      const auto key = compat::optimizer_state_key(optimizer, parameter);
      auto found = state.find(key);
      if (found == state.end()) {
        auto created = std::make_unique<torch::optim::SGDParamState>();
        created->momentum_buffer(torch::zeros_like(parameter, torch::MemoryFormat::Preserve));
        found = state.emplace(key, std::move(created)).first;
      }
      buffer = static_cast<torch::optim::SGDParamState&>(*found->second).momentum_buffer();
    }
    momentum_buffers_.push_back(buffer);
  }
}

void CapturableSgd::set_learning_rate(double learning_rate) {
  learning_rate_.fill_(learning_rate);
  for (auto& group : optimizer_.param_groups())
    group.options().set_lr(learning_rate);
}

void CapturableSgd::clear_gradients() {
  for (auto& parameter : parameters_)
    parameter.mutable_grad() = torch::Tensor();
}

void CapturableSgd::step() {
  torch::NoGradGuard no_grad;
  for (std::size_t index = 0; index < parameters_.size(); ++index) {
    torch::Tensor parameter = parameters_[index];
    const torch::Tensor& gradient = parameter.grad();
    if (!gradient.defined()) continue;
    torch::Tensor direction = weight_decay_ != 0.0 ? gradient.add(parameter, weight_decay_) : gradient;
    if (momentum_ != 0.0) {
      torch::Tensor& buffer = momentum_buffers_[index];
      torch::add_out(buffer, direction, buffer, momentum_);  // buf = d + momentum * buf, one pass
      direction = buffer;
    }
    parameter.addcmul_(direction, learning_rate_, -1.0);  // p -= lr * direction, lr read on the device
  }
}

}  // namespace ipj::train
