// TorchScript source generation for LayerPrograms, and freezing of user modules (see script_program.hpp).
#include "ipj/infer/script_program.hpp"

#include <torch/csrc/jit/passes/xnnpack_rewrite.h>
#include <torch/jit.h>

#include <sstream>

#include "ipj/core/error.hpp"
#include "ipj/infer/fp32_engine.hpp"

namespace ipj::infer {
namespace {

// optimizeForMobile freezes and folds BN itself, then swaps convolutions and linear layers for XNNPACK's
// prepacked operators. LibTorch built without XNNPACK leaves them as they were: nothing to gain, so it
// throws.
torch::jit::Module xnnpack_module(const torch::jit::Module& eval_module) {
  torch::jit::Module optimized = torch::jit::optimizeForMobile(eval_module);
  bool prepacked = false;
  for (const torch::jit::Node* node : optimized.get_method("forward").graph()->nodes())
    prepacked = prepacked || node->kind().toQualString() == std::string("prepacked::conv2d_clamp_run") ||
                node->kind().toQualString() == std::string("prepacked::linear_clamp_run");
  if (!prepacked)
    fail(ErrorCategory::unsupported,
         "no XNNPACK operator in the optimised graph (this LibTorch has no XNNPACK, or the model has no "
         "convolution or linear layer it takes)");
  return optimized;
}

}  // namespace

torch::jit::Module script_program(const quant::LayerProgram& program, Freezing freezing) {
  torch::jit::Module module("IpjProgram");
  std::ostringstream source;
  source << "def forward(self, x: Tensor) -> Tensor:\n";
  if (program.input_padding > 0) {
    module.register_buffer("pad_value", torch::tensor(program.input_pad_value).view({1, -1, 1, 1}));
    const auto pad = program.input_padding;
    source << "    x = torch.constant_pad_nd(x - self.pad_value, [" << pad << ", " << pad << ", " << pad
           << ", " << pad << "], 0.0) + self.pad_value\n";
  }
  for (std::size_t index = 0; index < program.layers.size(); ++index) {
    const quant::Layer& layer = program.layers[index];
    const std::string weight = "w" + std::to_string(index), bias = "b" + std::to_string(index);
    switch (layer.kind) {
      case quant::LayerKind::linear:
        module.register_parameter(weight, layer.weight.detach().clone(), false);
        module.register_parameter(bias, layer.bias.detach().clone(), false);
        source << "    x = torch.linear(x, self." << weight << ", self." << bias << ")\n";
        break;
      case quant::LayerKind::conv2d:
        module.register_parameter(weight, layer.weight.detach().clone(), false);
        module.register_parameter(bias, layer.bias.detach().clone(), false);
        source << "    x = torch.conv2d(x, self." << weight << ", self." << bias << ", [" << layer.stride
               << ", " << layer.stride << "], [" << layer.padding << ", " << layer.padding << "])\n";
        break;
      case quant::LayerKind::max_pool2d:
        source << "    x = torch.max_pool2d(x, [" << layer.pool << ", " << layer.pool << "], [" << layer.pool
               << ", " << layer.pool << "])\n";
        break;
      case quant::LayerKind::flatten:
        source << "    x = torch.flatten(x, 1)\n";
        break;
    }
    if (layer.relu) source << "    x = torch.relu(x)\n";
  }
  source << "    return x\n";
  module.define(source.str());
  module.eval();
  return freeze_for_inference(module, freezing);
}

torch::jit::Module freeze_for_inference(const torch::jit::Module& module, Freezing freezing) {
  try {
    torch::jit::Module copy = module.clone();
    copy.eval();
    if (freezing == Freezing::xnnpack) return xnnpack_module(copy);
    torch::jit::Module frozen = torch::jit::freeze(copy);
    // before optimize_for_inference, whose linear pass turns aten::linear into matmul + add
    if (freezing == Freezing::optimized_batch1) use_batch1_linear(frozen);
    if (freezing != Freezing::frozen) frozen = torch::jit::optimize_for_inference(frozen);
    return frozen;
  } catch (const c10::Error& error) {
    fail(ErrorCategory::unsupported,
         std::string("cannot freeze this TorchScript module: ") + error.what_without_backtrace());
  }
}

}  // namespace ipj::infer
