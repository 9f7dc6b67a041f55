// GradScaler with plain tensor ops: one fused finiteness check over all gradients, one host read per step.
#include "ipj/train/grad_scaler.hpp"

#include <torch/torch.h>

namespace ipj::train {

void GradScaler::unscale(torch::optim::Optimizer& optimizer) {
  if (unscaled_) return;
  const double inverse = 1.0 / scale_;
  torch::Tensor non_finite;  // 0-dim bool on the gradients' device (a CPU flag fails beside CUDA gradients)
  torch::NoGradGuard no_grad;
  for (auto& group : optimizer.param_groups()) {
    for (auto& parameter : group.params()) {
      torch::Tensor& grad = parameter.mutable_grad();
      if (!grad.defined()) continue;
      const torch::Tensor grad_non_finite = grad.isfinite().logical_not().any();
      non_finite = non_finite.defined() ? non_finite.logical_or(grad_non_finite) : grad_non_finite;
      grad.mul_(inverse);
    }
  }
  found_inf_ = non_finite.defined() && non_finite.item<bool>();
  unscaled_ = true;
}

bool GradScaler::step(torch::optim::Optimizer& optimizer) {
  unscale(optimizer);
  if (found_inf_) {
    ++skipped_steps_;
    return false;
  }
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (found_inf_) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ >= options_.growth_interval) {
    scale_ *= options_.growth_factor;
    growth_tracker_ = 0;
  }
  unscaled_ = false;
  found_inf_ = false;
}

}  // namespace ipj::train
