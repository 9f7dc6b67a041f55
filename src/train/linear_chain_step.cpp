// The linear-chain training step: forward, cross-entropy, backward and SGD by hand over buffers kept across
// steps (GEMMs on oneDNN's own primitives, fp32 or bf16, on the threads the plan gives GEMMs; at::mm_out
// where they are missing), elementwise work in chain_kernels' fused passes split over ATen's threads. bf16:
// activations, gradients and a weight copy in bf16, fp32 master weights, bias gradients and momentum (what
// autocast + an fp32 optimizer keep).
#include "ipj/train/linear_chain_step.hpp"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "ipj/core/error.hpp"
#include "ipj/device/threading.hpp"
#include "ipj/models/catalog.hpp"
#include "ipj/train/capturable_sgd.hpp"
#include "ipj/train/linear_chain_kernels.hpp"
#include "onednn_chain_gemms.hpp"

namespace ipj::train {
namespace {

namespace kernels = chain_kernels;
using kernels::Bf16Bits;

constexpr std::int64_t kRowGrain = 16;       // rows per task of a row pass
constexpr std::int64_t kColumnGrain = 64;    // columns per task of a column pass
constexpr std::int64_t kValueGrain = 32768;  // parameters per task of the SGD pass

template <typename Value>
Value* values_of(const torch::Tensor& tensor) {
  return static_cast<Value*>(tensor.data_ptr());
}

// Per layer: what the step keeps between steps ([capacity] rows; a batch uses its first B).
struct LayerBuffers {
  torch::Tensor weight_copy;  // bf16 only: [out, in] bf16(weight), refreshed by each update
  torch::Tensor output;       // [capacity, out]: x W^T, then + bias and ReLU in place (the activation)
  torch::Tensor output_grad;  // [capacity, out]: d loss / d output (the pre-ReLU gradient after the mask)
  torch::Tensor weight_grad;  // [out, in]
  torch::Tensor bias_grad;    // [out] fp32
  float* weight_velocity = nullptr;
  float* bias_velocity = nullptr;
};

class LinearChainStep : public TrainingStep {
 public:
  LinearChainStep(std::vector<ChainLayer> layers, CapturableSgd& sgd, ChainPrecision precision,
                  ChainGemms gemms)
      : layers_(std::move(layers)),
        sgd_(sgd),
        precision_(precision),
        onednn_(gemms == ChainGemms::best ? OnednnChainGemms::create(precision == ChainPrecision::bf16
                                                                         ? OnednnChainGemms::Element::bf16
                                                                         : OnednnChainGemms::Element::fp32)
                                          : nullptr) {
    buffers_.resize(layers_.size());
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      buffers_[l].weight_velocity = velocity_of(layers_[l].weight);
      buffers_[l].bias_velocity = velocity_of(layers_[l].bias);
      if (precision_ == ChainPrecision::bf16) {
        buffers_[l].weight_copy = layers_[l].weight.detach().to(torch::kBFloat16).contiguous();
      }
      // fp32 where oneDNN writes it (bf16 x bf16 -> fp32), else in the GEMMs' dtype
      buffers_[l].weight_grad = torch::empty(
          layers_[l].weight.sizes(), onednn_ ? torch::TensorOptions(torch::kFloat32) : activation_options());
      buffers_[l].bias_grad = torch::empty(layers_[l].bias.sizes(), torch::kFloat32);
      weight_offsets_.push_back(weight_offsets_.back() + layers_[l].weight.numel());
    }
  }

  StepLoss run(const data::Batch& batch, const StepContext& context) override {
    if (!context.starts_group || !context.applies_update || context.loss_share != 1.0)
      fail(ErrorCategory::internal, "the linear-chain step takes one micro-batch per update");
    torch::NoGradGuard no_grad;
    // oneDNN's GEMMs (and the passes) on the threads the plan gave the GEMMs: OpenBLAS's for an fp32 plan
    // (ATen's pool at 1 thread), ATen's for bf16 (read per step: a re-plan changes them).
    std::optional<device::CallerOpenMpThreads> gemm_threads;
    if (onednn_) gemm_threads.emplace(gemm_thread_count());
    const std::int64_t rows = batch.labels.size(0);
    reserve(rows);
    const torch::Tensor input = batch_input(batch.images, rows);  // [B, in] activation dtype
    const torch::Tensor labels = batch.labels.contiguous();       // [B] int64
    check_labels(labels);
    forward(input, rows);
    const double loss_sum = loss_and_gradient(labels, rows);
    backward(input, rows);
    update(context.learning_rate);
    return {torch::scalar_tensor(loss_sum / static_cast<double>(rows), torch::kFloat32),
            logits_.narrow(0, 0, rows).clone()};
  }

  const char* name() const override { return "linear_chain"; }
  std::string detail() const override {
    const std::string precision = bf16() ? "bf16" : "fp32";
    if (!onednn_) return precision + " GEMMs through ATen (at::mm_out" + (bf16() ? ")" : ": OpenBLAS)");
    return precision + " GEMMs on oneDNN's matmul primitives (" + onednn_->implementation() +
           ") with the GEMM threads (" + std::to_string(gemm_thread_count()) + ")";
  }

 private:
  bool bf16() const { return precision_ == ChainPrecision::bf16; }
  torch::TensorOptions activation_options() const {
    return torch::TensorOptions().dtype(bf16() ? torch::kBFloat16 : torch::kFloat32);
  }
  std::int64_t classes() const { return layers_.back().weight.size(0); }
  static int gemm_thread_count() {
    return device::openmp_threads_allowed(
        std::max(device::caller_openmp_threads(), device::blas_thread_count()));
  }

  float* velocity_of(const torch::Tensor& parameter) const {
    const auto& parameters = sgd_.parameters();
    for (std::size_t index = 0; index < parameters.size(); ++index) {
      if (!parameters[index].is_same(parameter)) continue;
      const torch::Tensor& buffer = sgd_.momentum_buffers()[index];
      return buffer.defined() ? values_of<float>(buffer) : nullptr;
    }
    fail(ErrorCategory::internal, "linear-chain step: a layer's parameter is not in the optimizer");
  }

  // Buffers for batches of up to `rows` (grown, never shrunk: the last short batch reuses them).
  void reserve(std::int64_t rows) {
    if (rows <= capacity_) return;
    capacity_ = rows;
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      const std::int64_t out = layers_[l].weight.size(0);
      buffers_[l].output = torch::empty({rows, out}, activation_options());
      buffers_[l].output_grad = torch::empty({rows, out}, activation_options());
    }
    const std::int64_t in = layers_.front().weight.size(1);
    if (bf16()) input_copy_ = torch::empty({rows, in}, activation_options());
    logits_ = torch::empty({rows, classes()}, torch::kFloat32);
    if (bf16()) logits_grad_ = torch::empty({rows, classes()}, torch::kFloat32);
  }

  torch::Tensor batch_input(const torch::Tensor& images, std::int64_t rows) {
    const std::int64_t in = layers_.front().weight.size(1);
    if (images.numel() != rows * in || images.scalar_type() != torch::kFloat32)
      fail(ErrorCategory::invalid_input, "linear-chain step: a batch of " + std::to_string(rows) +
                                             " images must hold " + std::to_string(rows * in) +
                                             " fp32 values, got " + std::to_string(images.numel()));
    const torch::Tensor flat = images.reshape({rows, in}).contiguous();  // [B, in] fp32
    if (!bf16()) return flat;
    const torch::Tensor copy = input_copy_.narrow(0, 0, rows);
    const float* source = values_of<float>(flat);
    auto* target = values_of<Bf16Bits>(copy);
    at::parallel_for(0, rows, kRowGrain, [&](std::int64_t begin, std::int64_t end) {
      kernels::to_bf16(source + begin * in, target + begin * in, (end - begin) * in);
    });
    return copy;
  }

  void check_labels(const torch::Tensor& labels) const {
    const auto* values = labels.data_ptr<std::int64_t>();
    for (std::int64_t row = 0; row < labels.size(0); ++row)
      if (values[row] < 0 || values[row] >= classes())
        fail(ErrorCategory::invalid_input,
             "label " + std::to_string(values[row]) + " outside [0, " + std::to_string(classes()) + ")");
  }

  const torch::Tensor& gemm_weight(std::size_t l) const {
    return bf16() ? buffers_[l].weight_copy : layers_[l].weight;
  }

  // output_l = input_l W_l^T + b_l, ReLU where the layer has one; the last layer's into logits_ (fp32).
  void forward(const torch::Tensor& input, std::int64_t rows) {
    if (onednn_) return forward_onednn(input, rows);
    torch::Tensor layer_input = input;
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      torch::Tensor output = buffers_[l].output.narrow(0, 0, rows);  // [B, out]
      at::mm_out(output, layer_input, gemm_weight(l).t());
      const std::int64_t cols = output.size(1);
      const float* bias = values_of<float>(layers_[l].bias);
      const bool last = l + 1 == layers_.size();
      if (last) {
        torch::Tensor logits = logits_.narrow(0, 0, rows);
        logits.copy_(output);  // [B, classes] fp32
        kernels::add_bias_relu(values_of<float>(logits), bias, cols, 0, rows, false);
        break;
      }
      const bool relu = layers_[l].relu;
      at::parallel_for(0, rows, kRowGrain, [&](std::int64_t begin, std::int64_t end) {
        if (bf16())
          kernels::add_bias_relu(values_of<Bf16Bits>(output), bias, cols, begin, end, relu);
        else
          kernels::add_bias_relu(values_of<float>(output), bias, cols, begin, end, relu);
      });
      layer_input = output;
    }
  }

  // On oneDNN's primitives: bias and ReLU inside the GEMM, the logits written in fp32.
  void forward_onednn(const torch::Tensor& input, std::int64_t rows) {
    const void* layer_input = input.data_ptr();
    for (std::size_t l = 0; l < layers_.size(); ++l) {
      const bool last = l + 1 == layers_.size();
      void* output = last ? logits_.data_ptr() : buffers_[l].output.data_ptr();  // [B, out]
      onednn_->forward(shape(l), rows, layer_input, gemm_weight(l).data_ptr(),
                       values_of<float>(layers_[l].bias), output, layers_[l].relu, last);
      layer_input = output;
    }
  }

  OnednnChainGemms::Layer shape(std::size_t l) const {
    return {l, layers_[l].weight.size(1), layers_[l].weight.size(0)};
  }

  // The summed loss; the last layer's output gradient and bias gradient.
  double loss_and_gradient(const torch::Tensor& labels, std::int64_t rows) {
    LayerBuffers& last = buffers_.back();
    float* grad = bf16() ? values_of<float>(logits_grad_) : values_of<float>(last.output_grad);
    const double loss_sum =
        kernels::softmax_cross_entropy(values_of<float>(logits_), labels.data_ptr<std::int64_t>(), rows,
                                       classes(), grad, values_of<float>(last.bias_grad));
    if (bf16()) kernels::to_bf16(grad, values_of<Bf16Bits>(last.output_grad), rows * classes());
    return loss_sum;
  }

  void backward(const torch::Tensor& input, std::int64_t rows) {
    for (std::size_t l = layers_.size(); l-- > 0;) {
      const torch::Tensor output_grad = buffers_[l].output_grad.narrow(0, 0, rows);  // [B, out]
      const torch::Tensor layer_input = l == 0 ? input : buffers_[l - 1].output.narrow(0, 0, rows);
      if (onednn_)
        onednn_->weight_grad(shape(l), rows, output_grad.data_ptr(), layer_input.data_ptr(),
                             values_of<float>(buffers_[l].weight_grad));
      else
        at::mm_out(buffers_[l].weight_grad, output_grad.t(), layer_input);  // [out, in]
      if (l == 0) break;
      LayerBuffers& below = buffers_[l - 1];
      torch::Tensor input_grad = below.output_grad.narrow(0, 0, rows);  // [B, in]
      if (onednn_)
        onednn_->input_grad(shape(l), rows, output_grad.data_ptr(), gemm_weight(l).data_ptr(),
                            input_grad.data_ptr());
      else
        at::mm_out(input_grad, output_grad, gemm_weight(l));
      mask_and_bias_grad(below, layers_[l - 1].relu, rows);
    }
  }

  // The lower layer's ReLU backward (its output as the mask) and its bias gradient (column sums).
  void mask_and_bias_grad(LayerBuffers& layer, bool relu, std::int64_t rows) {
    const std::int64_t cols = layer.output.size(1);
    float* bias_grad = values_of<float>(layer.bias_grad);
    if (!relu) {  // no mask: the bias gradient is the column sums alone
      at::sum_out(layer.bias_grad, layer.output_grad.narrow(0, 0, rows).to(torch::kFloat32), 0);
      return;
    }
    at::parallel_for(0, cols, kColumnGrain, [&](std::int64_t begin, std::int64_t end) {
      if (bf16())
        kernels::relu_backward_bias_grad(values_of<Bf16Bits>(layer.output_grad),
                                         values_of<Bf16Bits>(layer.output), rows, cols, begin, end,
                                         bias_grad);
      else
        kernels::relu_backward_bias_grad(values_of<float>(layer.output_grad), values_of<float>(layer.output),
                                         rows, cols, begin, end, bias_grad);
    });
  }

  // SGD over every weight in one parallel region (the layers' weights as one index range: one wake-up of the
  // pool instead of one per layer), then the biases on this thread.
  void update(double learning_rate) {
    if (learning_rate != learning_rate_) {
      sgd_.set_learning_rate(learning_rate);  // the optimizer's options, what checkpoints save
      learning_rate_ = learning_rate;
    }
    const kernels::SgdSettings settings{static_cast<float>(learning_rate),
                                        static_cast<float>(sgd_.momentum()),
                                        static_cast<float>(sgd_.weight_decay())};
    at::parallel_for(0, weight_offsets_.back(), kValueGrain, [&](std::int64_t begin, std::int64_t end) {
      for (std::size_t l = 0; l < layers_.size(); ++l) {
        const std::int64_t first = std::max(begin, weight_offsets_[l]);
        const std::int64_t last = std::min(end, weight_offsets_[l + 1]);
        if (first < last) update_weights(l, first - weight_offsets_[l], last - first, settings);
      }
    });
    for (std::size_t l = 0; l < layers_.size(); ++l)
      kernels::sgd_update(values_of<float>(layers_[l].bias), buffers_[l].bias_velocity,
                          values_of<float>(buffers_[l].bias_grad), layers_[l].bias.numel(), settings,
                          nullptr);
  }

  // Weights [offset, offset + count) of layer l (flat index into its [out, in] matrix).
  void update_weights(std::size_t l, std::int64_t offset, std::int64_t count, kernels::SgdSettings settings) {
    const LayerBuffers& layer = buffers_[l];
    float* weight = values_of<float>(layers_[l].weight) + offset;
    float* velocity = layer.weight_velocity == nullptr ? nullptr : layer.weight_velocity + offset;
    Bf16Bits* copy = bf16() ? values_of<Bf16Bits>(layer.weight_copy) + offset : nullptr;
    if (layer.weight_grad.scalar_type() == torch::kBFloat16)
      kernels::sgd_update(weight, velocity, values_of<Bf16Bits>(layer.weight_grad) + offset, count, settings,
                          copy);
    else
      kernels::sgd_update(weight, velocity, values_of<float>(layer.weight_grad) + offset, count, settings,
                          copy);
  }

  std::vector<ChainLayer> layers_;
  CapturableSgd& sgd_;
  ChainPrecision precision_;
  std::unique_ptr<OnednnChainGemms> onednn_;  // GEMMs on oneDNN's own primitives; null: ATen's
  std::vector<LayerBuffers> buffers_;
  std::vector<std::int64_t> weight_offsets_{
      0};  // [layers + 1]: where each layer's weights start in one range
  std::int64_t capacity_ = 0;
  torch::Tensor input_copy_;   // bf16 only: [capacity, in] the batch in bf16
  torch::Tensor logits_;       // [capacity, classes] fp32
  torch::Tensor logits_grad_;  // bf16 only: [capacity, classes] fp32, before its bf16 copy
  double learning_rate_ = std::nan("");
};

}  // namespace

std::optional<std::vector<ChainLayer>> linear_chain_layers(const std::string& zoo_name,
                                                           models::Classifier& model) {
  const models::ModelEntry* entry = models::find_model_entry(zoo_name);
  if (entry == nullptr || !entry->has_layer_program()) return std::nullopt;
  const auto& program = entry->layer_program;
  if (program.front().kind != models::ProgramStep::Kind::flatten || program.size() < 2) return std::nullopt;
  std::vector<ChainLayer> layers;
  for (std::size_t index = 1; index < program.size(); ++index) {
    const models::ProgramStep& step = program[index];
    if (step.kind != models::ProgramStep::Kind::linear) return std::nullopt;
    const auto children = model.named_children();
    const auto* child = children.find(step.module);
    const auto* linear = child == nullptr ? nullptr : (*child)->as<torch::nn::Linear>();
    if (linear == nullptr || !linear->bias.defined()) return std::nullopt;
    layers.push_back({linear->weight, linear->bias, step.relu});
  }
  if (layers.back().relu) return std::nullopt;  // logits go to the loss as they are
  for (const ChainLayer& layer : layers)
    if (layer.weight.scalar_type() != torch::kFloat32 || !layer.weight.is_contiguous() ||
        !layer.weight.device().is_cpu())
      return std::nullopt;
  return layers;
}

std::unique_ptr<TrainingStep> make_linear_chain_step(std::vector<ChainLayer> layers, CapturableSgd& sgd,
                                                     ChainPrecision precision, ChainGemms gemms) {
  return std::make_unique<LinearChainStep>(std::move(layers), sgd, precision, gemms);
}

}  // namespace ipj::train
