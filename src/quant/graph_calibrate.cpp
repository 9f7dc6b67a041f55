// Calibration of activation ranges and quantization-aware training on the float graph IR.
#include <torch/torch.h>

#include "ipj/data/batch_loader.hpp"
#include "ipj/quant/quantized_graph.hpp"
#include "program_training.hpp"

namespace ipj::quant {
namespace {

// Raw pixels in [0, 1] are exact in quint8 with scale 1/255, zero point 0.
constexpr QuantParams kPixelParams{1.0 / 255.0, 0};

// Fills the parameters of the nodes that are not quantization points from their input.
std::vector<QuantParams> propagate(const Graph& graph, std::vector<QuantParams> params) {
  const std::vector<bool> points = quantization_points(graph);
  for (std::size_t index = 0; index < graph.nodes.size(); ++index)
    if (!points[index]) params[index] = index == 0 ? kPixelParams : params[graph.nodes[index].inputs[0]];
  return params;
}

}  // namespace

std::vector<bool> quantization_points(const Graph& graph) {
  std::vector<bool> points(graph.nodes.size(), false);
  for (std::size_t index = 0; index < graph.nodes.size(); ++index) {
    const NodeKind kind = graph.nodes[index].kind;
    points[index] = has_weights(graph.nodes[index]) || kind == NodeKind::add ||
                    (kind == NodeKind::input && !graph.input_mean.empty());
  }
  return points;
}

std::vector<QuantParams> calibrate_graph(const Graph& graph, const data::ImageSet& images,
                                         std::int64_t samples, std::int64_t batch_size, ObserverKind observer,
                                         double percentile) {
  torch::NoGradGuard no_grad;
  const std::vector<bool> points = quantization_points(graph);
  std::vector<ActivationObserver> observers(graph.nodes.size(), ActivationObserver(observer, percentile));
  GraphHooks hooks;
  hooks.output = [&](std::size_t index, torch::Tensor output) {
    if (points[index]) observers[index].observe(output);
    return output;
  };
  data::for_each_pixel_batch_in_order(
      images, batch_size, samples,
      [&](const torch::Tensor& pixels, const torch::Tensor&) { run_graph(graph, pixels, hooks); });
  std::vector<QuantParams> params(graph.nodes.size());
  for (std::size_t index = 0; index < graph.nodes.size(); ++index)
    if (points[index]) params[index] = observers[index].quant_params();
  return propagate(graph, std::move(params));
}

std::vector<QuantParams> quantization_aware_training_graph(Graph& graph, const data::ImageSet& images,
                                                           int epochs, double learning_rate,
                                                           std::int64_t batch_size, std::uint64_t seed,
                                                           bool show_progress) {
  // Start from calibrated ranges, then follow them with an exponential moving average during training.
  const std::vector<QuantParams> start =
      calibrate_graph(graph, images, 2000, batch_size, ObserverKind::minmax, 100.0);
  const std::vector<bool> points = quantization_points(graph);
  std::vector<double> low(graph.nodes.size(), 0.0), high(graph.nodes.size(), 0.0);
  for (std::size_t index = 0; index < graph.nodes.size(); ++index) {
    low[index] = -start[index].scale * static_cast<double>(start[index].zero_point);
    high[index] = low[index] + 255.0 * start[index].scale;
  }
  const double momentum = 0.01;  // as PyTorch's MovingAverageMinMaxObserver
  GraphHooks hooks;
  hooks.weight = [](std::size_t, const torch::Tensor& weight) {
    const torch::Tensor scales = weight_scales(weight).to(torch::kFloat);  // [out]
    const torch::Tensor zeros = torch::zeros({scales.size(0)}, torch::kInt);
    return torch::fake_quantize_per_channel_affine(weight, scales, zeros, 0, -128, 127);
  };
  hooks.output = [&](std::size_t index, torch::Tensor output) {
    if (!points[index]) return output;
    {
      torch::NoGradGuard no_grad;
      const torch::Tensor detached = output.detach();
      low[index] = (1 - momentum) * low[index] + momentum * detached.min().item<double>();
      high[index] = (1 - momentum) * high[index] + momentum * detached.max().item<double>();
    }
    const QuantParams params = affine_params(low[index], high[index]);
    return torch::fake_quantize_per_tensor_affine(output, params.scale, params.zero_point, 0, 255);
  };
  const std::vector<torch::Tensor> parameters = make_trainable(graph);
  const PixelTraining settings{epochs, learning_rate, batch_size, seed, "qat epoch", show_progress};
  // The loss hook: the graph's forward pass with fake-quantised weights and activations.
  train_on_pixels(images, settings, parameters, [&](const data::Batch& batch, const train::StepContext&) {
    const torch::Tensor logits = run_graph(graph, batch.images, hooks);  // [B, classes]
    return train::StepLoss{torch::nn::functional::cross_entropy(logits, batch.labels), logits};
  });
  freeze(graph);
  std::vector<QuantParams> params(graph.nodes.size());
  for (std::size_t index = 0; index < graph.nodes.size(); ++index)
    if (points[index]) params[index] = affine_params(low[index], high[index]);
  return propagate(graph, std::move(params));
}

}  // namespace ipj::quant
