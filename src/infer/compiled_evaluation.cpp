// Folding, scripting and the evaluation loop over raw pixels.
#include "ipj/infer/compiled_evaluation.hpp"

#include <torch/torch.h>

#include <chrono>

#include "ipj/core/error.hpp"
#include "ipj/data/batch_loader.hpp"
#include "ipj/infer/script_program.hpp"
#include "ipj/models/catalog.hpp"
#include "ipj/quant/layer_program.hpp"

namespace ipj::infer {

void require_compilable(const std::string& model_name) {
  if (!models::has_layer_program(model_name))
    fail(ErrorCategory::unsupported,
         "--compile jit compiles " + models::model_names_where([](const models::ModelEntry& entry) {
           return entry.has_layer_program();
         }) + "; '" +
             model_name + "' is not a straight line of layers (use --compile none)");
}

train::EvalResult evaluate_compiled(models::Classifier& model, const std::string& model_name,
                                    const data::Dataset& dataset, std::int64_t batch_size) {
  const auto start = std::chrono::steady_clock::now();
  const bool was_training = model.is_training();
  model.eval();
  const Json info = {{"name", model_name},
                     {"input_shape", {dataset.test.channels, dataset.test.height, dataset.test.width}},
                     {"num_classes", dataset.num_classes},
                     {"mean", dataset.normalization.mean},
                     {"std", dataset.normalization.std}};
  torch::jit::Module module = script_program(quant::extract_program(model, info));
  if (was_training) model.train();
  torch::NoGradGuard no_grad;
  std::int64_t correct = 0;
  double loss_sum = 0.0;
  data::for_each_pixel_batch_in_order(
      dataset.test, batch_size, 0, [&](const torch::Tensor& pixels, const torch::Tensor& labels) {
        const torch::Tensor logits = module.forward({pixels}).toTensor();  // [B, classes]
        correct += logits.argmax(1).eq(labels).sum().item<std::int64_t>();
        loss_sum +=
            torch::nn::functional::cross_entropy(
                logits, labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                .item<double>();
      });
  train::EvalResult result;
  result.samples = dataset.test.count;
  result.accuracy = result.samples ? static_cast<double>(correct) / static_cast<double>(result.samples) : 0.0;
  result.loss = result.samples ? loss_sum / static_cast<double>(result.samples) : 0.0;
  result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace ipj::infer
