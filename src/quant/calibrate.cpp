// Calibration of activation ranges and quantization-aware training on the float LayerProgram.
#include <torch/torch.h>

#include "ipj/data/batch_loader.hpp"
#include "ipj/quant/quantize.hpp"
#include "program_training.hpp"

namespace ipj::quant {
std::vector<QuantParams> calibrate(const LayerProgram& program, const data::ImageSet& images,
                                   std::int64_t samples, std::int64_t batch_size, ObserverKind observer,
                                   double percentile) {
  torch::NoGradGuard no_grad;
  std::vector<ActivationObserver> observers(program.layers.size(), ActivationObserver(observer, percentile));
  data::for_each_pixel_batch_in_order(
      images, batch_size, samples, [&](const torch::Tensor& pixels, const torch::Tensor&) {
        run_float(program, pixels,
                  [&](std::size_t index, const torch::Tensor& output) { observers[index].observe(output); });
      });
  std::vector<QuantParams> params(program.layers.size());
  for (std::size_t index = 0; index < program.layers.size(); ++index)
    if (has_weights(program.layers[index])) params[index] = observers[index].quant_params();
  return params;
}

std::vector<QuantParams> quantization_aware_training(LayerProgram& program, const data::ImageSet& images,
                                                     int epochs, double learning_rate,
                                                     std::int64_t batch_size, std::uint64_t seed,
                                                     bool show_progress) {
  // Start from calibrated ranges, then follow them with an exponential moving average during training.
  std::vector<QuantParams> start = calibrate(program, images, 2000, batch_size, ObserverKind::minmax, 100.0);
  std::vector<double> range_low(program.layers.size(), 0.0), range_high(program.layers.size(), 0.0);
  for (std::size_t index = 0; index < program.layers.size(); ++index) {
    range_low[index] = -start[index].scale * static_cast<double>(start[index].zero_point);
    range_high[index] = range_low[index] + 255.0 * start[index].scale;
  }
  const std::vector<torch::Tensor> parameters = make_trainable(program);
  const double momentum = 0.01;  // EMA of activation ranges, as PyTorch's MovingAverageMinMaxObserver
  const PixelTraining settings{epochs, learning_rate, batch_size, seed, "qat epoch", show_progress};
  // The loss hook: the program's forward pass with fake-quantised weights and activations.
  train_on_pixels(images, settings, parameters, [&](const data::Batch& batch, const train::StepContext&) {
    torch::Tensor x = pad_input(program, batch.images);
    x = torch::fake_quantize_per_tensor_affine(x, 1.0 / 255.0, 0, 0, 255);
    for (std::size_t index = 0; index < program.layers.size(); ++index) {
      const Layer& layer = program.layers[index];
      if (has_weights(layer)) {
        const torch::Tensor scales = weight_scales(layer.weight).to(torch::kFloat);  // [out]
        const torch::Tensor zeros = torch::zeros({scales.size(0)}, torch::kInt);
        const torch::Tensor weight =
            torch::fake_quantize_per_channel_affine(layer.weight, scales, zeros, 0, -128, 127);
        x = layer.kind == LayerKind::linear
                ? torch::linear(x, weight, layer.bias)
                : torch::conv2d(x, weight, layer.bias, layer.stride, layer.padding);
        if (layer.relu) x = torch::relu(x);
        {
          torch::NoGradGuard no_grad;
          const torch::Tensor detached = x.detach();
          range_low[index] = (1 - momentum) * range_low[index] + momentum * detached.min().item<double>();
          range_high[index] = (1 - momentum) * range_high[index] + momentum * detached.max().item<double>();
        }
        const QuantParams params = affine_params(range_low[index], range_high[index]);
        x = torch::fake_quantize_per_tensor_affine(x, params.scale, params.zero_point, 0, 255);
      } else if (layer.kind == LayerKind::max_pool2d) {
        x = torch::max_pool2d(x, {layer.pool, layer.pool}, {layer.pool, layer.pool}, {0, 0}, {1, 1});
      } else {
        x = x.flatten(1);
      }
    }
    return train::StepLoss{torch::nn::functional::cross_entropy(x, batch.labels), x};
  });
  freeze(program);
  std::vector<QuantParams> params(program.layers.size());
  for (std::size_t index = 0; index < program.layers.size(); ++index) {
    const Layer& layer = program.layers[index];
    if (has_weights(layer)) params[index] = affine_params(range_low[index], range_high[index]);
  }
  return params;
}

}  // namespace ipj::quant
