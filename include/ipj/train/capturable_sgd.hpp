// SGD with momentum whose update has no host-side scalars: the learning rate lives in a device tensor, so the
// step can be recorded once into a CUDA graph and replayed while the schedule changes the rate; on the CPU it
// is ipj's fused step (the momentum in one pass instead of two). The same update as torch::optim::SGD
// (dampening 0, no Nesterov) up to rounding (one fused multiply-add where torch rounds twice); it shares that
// optimizer's momentum buffers, so checkpoints and resume keep working through the ordinary optimizer.
#pragma once

#include <torch/optim/sgd.h>
#include <torch/types.h>

#include <vector>

namespace ipj::train {

class CapturableSgd {
 public:
  // Takes the parameters and options of `optimizer` (one parameter group). Creates zero momentum buffers in
  // the optimizer's state where it has none yet (a zero buffer gives torch's first step exactly) and keeps
  // the very same tensors, so that updates made here are what the optimizer saves.
  explicit CapturableSgd(torch::optim::SGD& optimizer);

  // Writes the rate into the device tensor (a kernel, not a graph change) and into the optimizer's options.
  void set_learning_rate(double learning_rate);
  // One update from the parameters' current gradients: d = grad + weight_decay * p; buf = momentum * buf + d;
  // p -= lr * buf (p -= lr * d without momentum). Parameters without a gradient are skipped.
  void step();
  // Sets every parameter's gradient to none (not zero): the next backward moves its result in instead of
  // adding it to zeros, and under CUDA-graph capture allocates it from the graph's pool.
  void clear_gradients();

  const torch::Tensor& learning_rate_tensor() const { return learning_rate_; }  // [] fp32 on the device
  const std::vector<torch::Tensor>& parameters() const { return parameters_; }
  double momentum() const { return momentum_; }
  double weight_decay() const { return weight_decay_; }
  // The optimizer-owned momentum buffers, one per parameter (undefined tensors without momentum).
  const std::vector<torch::Tensor>& momentum_buffers() const { return momentum_buffers_; }

 private:
  torch::optim::SGD& optimizer_;
  std::vector<torch::Tensor> parameters_;
  std::vector<torch::Tensor> momentum_buffers_;  // parallel to parameters_; undefined without momentum
  torch::Tensor learning_rate_;                  // []
  double momentum_ = 0.0;
  double weight_decay_ = 0.0;
};

}  // namespace ipj::train
