// Dynamic loss scaling (the C++ counterpart of torch.cuda.amp.GradScaler) with ordinary tensor ops, so it
// runs on the CPU too (Debian's LibTorch 1.13 has no CPU kernels for the fused _amp_* ops). Usage per
// optimizer step:
//   scaler.scale(loss).backward();  scaler.unscale(optimizer);  [clip]  scaler.step(optimizer);
//   scaler.update();
#pragma once

#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <cstdint>

namespace ipj::train {

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  std::int64_t growth_interval = 2000;  // clean steps before the scale grows
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {}) : options_(options), scale_(options.init_scale) {}

  torch::Tensor scale(const torch::Tensor& loss) const { return loss * scale_; }
  // Divides every gradient by the scale (once per step) and records whether any is inf/NaN.
  void unscale(torch::optim::Optimizer& optimizer);
  // Steps the optimizer unless a gradient was inf/NaN (then the weights stay untouched). Returns true if
  // stepped.
  bool step(torch::optim::Optimizer& optimizer);
  // Backs off after an overflow, grows after growth_interval clean steps.
  void update();

  double current_scale() const { return scale_; }
  std::int64_t growth_tracker() const { return growth_tracker_; }
  std::int64_t skipped_steps() const { return skipped_steps_; }
  bool found_inf() const { return found_inf_; }
  // Checkpoint state.
  void set_state(double scale, std::int64_t growth_tracker) {
    scale_ = scale;
    growth_tracker_ = growth_tracker;
  }

 private:
  GradScalerOptions options_;
  double scale_;
  std::int64_t growth_tracker_ = 0;
  std::int64_t skipped_steps_ = 0;
  bool unscaled_ = false;
  bool found_inf_ = false;
};

}  // namespace ipj::train
