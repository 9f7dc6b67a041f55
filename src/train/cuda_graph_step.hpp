// --compile graphs: one whole training step (forward under autocast, loss, backward, SGD update) recorded
// once as a CUDA graph and replayed for every batch. IPJ_WITH_CUDA builds only. Limits: fixed batch shape
// (the trainer drops a short last batch), SGD through CapturableSgd, no loss scaling, no accumulation.
#pragma once

#ifdef IPJ_WITH_CUDA

#include <ATen/cuda/CUDAGraph.h>
#include <torch/torch.h>

#include "ipj/models/classifier.hpp"
#include "ipj/train/capturable_sgd.hpp"
#include "ipj/train/training_choices.hpp"

namespace ipj::train {

class CudaGraphTrainingStep {
 public:
  // Records the step on the first batch (images: [B, C, H, W], labels: [B], already on the CUDA device).
  // The warm-up passes that capture needs run with a zero learning rate and the model's buffers and momentum
  // are restored afterwards, so building the graph leaves the model as it was.
  CudaGraphTrainingStep(models::Classifier& model, CapturableSgd& optimizer, Precision precision,
                        const torch::Tensor& images, const torch::Tensor& labels);

  std::int64_t batch_size() const { return static_images_.size(0); }
  // Copies the batch into the graph's inputs and replays the step. Shapes must equal the recorded ones.
  void run(const torch::Tensor& images, const torch::Tensor& labels);
  const torch::Tensor& loss() const { return static_loss_; }      // [] fp32: this batch's mean loss
  const torch::Tensor& logits() const { return static_logits_; }  // [B, classes]: this batch's outputs

 private:
  at::cuda::CUDAGraph graph_;
  torch::Tensor static_images_;  // [B, C, H, W]
  torch::Tensor static_labels_;  // [B]
  torch::Tensor static_loss_;    // []
  torch::Tensor static_logits_;  // [B, classes]
};

}  // namespace ipj::train

#endif  // IPJ_WITH_CUDA
