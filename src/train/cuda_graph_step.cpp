// CUDA-graph capture and replay of the training step (IPJ_WITH_CUDA builds only; empty otherwise).
// Follows PyTorch's whole-network capture recipe: warm-up on a side stream, gradients set to none before
// capture so that backward allocates them from the graph's pool, autocast's weight cache off while recording.
#include "cuda_graph_step.hpp"

#ifdef IPJ_WITH_CUDA

#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>

#include <vector>

#include "ipj/core/error.hpp"
#include "ipj/train/precision.hpp"

namespace ipj::train {
namespace {

constexpr int kWarmupPasses = 3;  // what PyTorch's recipe uses before capture (lazy init, cuDNN autotuning)

// Makes `waiting` wait for the work queued so far on `source`.
void wait_for(const at::cuda::CUDAStream& waiting, const at::cuda::CUDAStream& source) {
  at::cuda::CUDAEvent event;
  event.record(source);
  event.block(waiting);
}

}  // namespace

CudaGraphTrainingStep::CudaGraphTrainingStep(models::Classifier& model, CapturableSgd& optimizer,
                                             Precision precision, const torch::Tensor& images,
                                             const torch::Tensor& labels) {
  if (!images.is_cuda() || !labels.is_cuda())
    fail(ErrorCategory::internal, "CUDA graph capture needs the batch on the CUDA device");
  static_images_ = images.clone();
  static_labels_ = labels.clone();
  auto one_step = [&] {
    torch::Tensor logits;  // [B, classes]
    {
      AutocastRegion autocast(precision, /*cuda=*/true);
      logits = model.forward(static_images_);
    }
    torch::Tensor loss = torch::nn::functional::cross_entropy(logits.to(torch::kFloat32), static_labels_);
    loss.backward();
    optimizer.step();
    static_loss_ = loss.detach();
    static_logits_ = logits.detach();
  };

  // Snapshot of what the warm-up passes change besides the weights (BN statistics, momentum buffers): the
  // passes run with learning rate 0, so weights stay, and everything else is copied back afterwards.
  std::vector<torch::Tensor> buffers = model.buffers();
  std::vector<torch::Tensor> saved_buffers;
  for (const auto& buffer : optimizer.momentum_buffers())
    if (buffer.defined()) buffers.push_back(buffer);
  for (const auto& buffer : buffers)
    saved_buffers.push_back(buffer.clone());
  const double learning_rate = optimizer.learning_rate_tensor().item<double>();

  const bool autocast_cache = at::autocast::is_autocast_cache_enabled();
  at::autocast::set_autocast_cache_enabled(false);
  const at::cuda::CUDAStream main_stream = at::cuda::getCurrentCUDAStream();
  const at::cuda::CUDAStream side_stream = at::cuda::getStreamFromPool();
  wait_for(side_stream, main_stream);
  try {
    at::cuda::CUDAStreamGuard on_side_stream(side_stream);
    optimizer.set_learning_rate(0.0);
    for (int pass = 0; pass < kWarmupPasses; ++pass) {
      optimizer.clear_gradients();
      one_step();
    }
    {
      torch::NoGradGuard no_grad;
      for (std::size_t index = 0; index < buffers.size(); ++index)
        buffers[index].copy_(saved_buffers[index]);
    }
    side_stream.synchronize();
    optimizer.clear_gradients();
    graph_.capture_begin();
    one_step();
    graph_.capture_end();
  } catch (const std::exception& error) {
    at::autocast::set_autocast_cache_enabled(autocast_cache);
    fail(ErrorCategory::runtime, std::string("recording the training step as a CUDA graph failed: ") +
                                     error.what() + " (train with --compile none to run it eagerly)");
  }
  at::autocast::set_autocast_cache_enabled(autocast_cache);
  wait_for(main_stream, side_stream);
  optimizer.set_learning_rate(learning_rate);
}

void CudaGraphTrainingStep::run(const torch::Tensor& images, const torch::Tensor& labels) {
  if (images.sizes() != static_images_.sizes() || labels.sizes() != static_labels_.sizes())
    fail(ErrorCategory::internal, "CUDA graph step: batch shape differs from the recorded one");
  static_images_.copy_(images, /*non_blocking=*/true);
  static_labels_.copy_(labels, /*non_blocking=*/true);
  graph_.replay();
}

}  // namespace ipj::train

#endif  // IPJ_WITH_CUDA
