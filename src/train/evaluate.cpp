// Evaluation loop (no prefetch thread: batches are cheap next to the forward pass).
#include "ipj/train/evaluate.hpp"

#include <torch/torch.h>

#include <chrono>

#include "ipj/data/batch_loader.hpp"
#include "ipj/train/precision.hpp"

namespace ipj::train {

EvalResult evaluate(models::Classifier& model, const data::ImageSet& images,
                    const data::Normalization& normalization, std::int64_t batch_size, Precision precision,
                    const DeviceSpec& device_spec) {
  const auto start = std::chrono::steady_clock::now();
  const bool was_training = model.is_training();
  model.eval();
  torch::NoGradGuard no_grad;
  data::LoaderOptions options;
  options.batch_size = batch_size;
  options.shuffle = false;
  options.prefetch_batches = 0;
  data::BatchLoader loader(images, normalization, options);
  const torch::Device device(device_name(device_spec));
  torch::Tensor correct = torch::zeros({}, torch::TensorOptions(torch::kInt64).device(device));
  torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions(torch::kFloat64).device(device));
  while (auto batch = loader.next()) {
    torch::Tensor logits;  // [B, classes]
    {
      AutocastRegion autocast(precision, device.is_cuda());
      logits = model.forward(batch->images.to(device));
    }
    const torch::Tensor labels = batch->labels.to(device);  // [B]
    correct += logits.argmax(1).eq(labels).sum();
    loss_sum += torch::nn::functional::cross_entropy(
                    logits.to(torch::kFloat32), labels,
                    torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                    .to(torch::kFloat64);
  }
  if (was_training) model.train();
  EvalResult result;
  result.samples = images.count;
  if (images.count > 0) {
    result.accuracy = static_cast<double>(correct.item<std::int64_t>()) / static_cast<double>(images.count);
    result.loss = loss_sum.item<double>() / static_cast<double>(images.count);
  }
  result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

double pixel_accuracy(const PixelForward& forward, const data::ImageSet& images, std::int64_t batch_size,
                      std::int64_t limit) {
  torch::NoGradGuard no_grad;
  std::int64_t correct = 0;
  std::int64_t seen = 0;
  data::for_each_pixel_batch_in_order(images, batch_size, limit,
                                      [&](const torch::Tensor& pixels, const torch::Tensor& labels) {
                                        const torch::Tensor logits = forward(pixels);  // [B, classes]
                                        correct += logits.argmax(1).eq(labels).sum().item<std::int64_t>();
                                        seen += labels.size(0);
                                      });
  return seen == 0 ? 0.0 : static_cast<double>(correct) / static_cast<double>(seen);
}

}  // namespace ipj::train
