// The depthwise test model (depthwise_model.hpp): fixed weights from a fixed seed.
#include "depthwise_model.hpp"

#include <torch/torch.h>

namespace ipj::infer {

// A small MobileNet-like block: stem conv + BN + ReLU6, depthwise 3x3 + ReLU6, pointwise 1x1, global average
// pool, linear. Input [B, 1, 12, 12] -> [B, 4].
torch::jit::Module depthwise_module(const std::string& first_line) {
  torch::jit::Module module("DepthwiseNet");
  torch::manual_seed(5);
  module.register_parameter("stem", torch::randn({8, 1, 3, 3}) * 0.5, false);
  module.register_buffer("bn_mean", torch::randn({8}) * 0.1);
  module.register_buffer("bn_var", torch::rand({8}) + 0.5);
  module.register_parameter("bn_weight", torch::rand({8}) + 0.5, false);
  module.register_parameter("bn_bias", torch::randn({8}) * 0.1, false);
  module.register_parameter("depthwise", torch::randn({8, 1, 3, 3}) * 0.5, false);
  module.register_parameter("pointwise", torch::randn({16, 8, 1, 1}) * 0.3, false);
  module.register_parameter("fc_w", torch::randn({4, 16}) * 0.3, false);
  module.register_parameter("fc_b", torch::randn({4}) * 0.1, false);
  module.define(R"(
def forward(self, x: Tensor) -> Tensor:
    )" + (first_line.empty() ? std::string("x = x") : first_line) +
                R"(
    x = torch.conv2d(x, self.stem, None, [2, 2], [1, 1])
    x = torch.batch_norm(x, self.bn_weight, self.bn_bias, self.bn_mean, self.bn_var, False, 0.1, 1e-5, False)
    x = torch.clamp(x, 0.0, 6.0)
    x = torch.clamp(torch.conv2d(x, self.depthwise, None, [1, 1], [1, 1], [1, 1], 8), 0.0, 6.0)
    x = torch.conv2d(x, self.pointwise)
    x = torch.adaptive_avg_pool2d(x, [1, 1]).flatten(1)
    return torch.linear(x, self.fc_w, self.fc_b)
)");
  module.eval();
  return module;
}

LoadOptions depthwise_options(Fp32Engine engine, std::int64_t batch) {
  LoadOptions options;
  options.inputs.input_shape = {1, 12, 12};
  options.run.variant = Variant::fp32;
  options.run.fp32_engine_batch = batch;
  options.run.fp32_engine = engine;
  return options;
}

}  // namespace ipj::infer
