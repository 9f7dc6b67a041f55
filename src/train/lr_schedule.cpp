// Learning-rate schedule arithmetic.
#include "ipj/train/lr_schedule.hpp"

#include <algorithm>
#include <cmath>

namespace ipj::train {

namespace {

double scheduled_rate(const ScheduleSpec& spec, int epoch, std::int64_t step) {
  if (spec.kind == ScheduleKind::step) {
    const int step_size = spec.step_size > 0 ? spec.step_size : std::max(1, spec.total_epochs / 3);
    return spec.base_lr * std::pow(spec.gamma, epoch / step_size);
  }
  if (spec.kind == ScheduleKind::cosine) {
    const double total = static_cast<double>(spec.total_epochs) * static_cast<double>(spec.steps_per_epoch);
    const double done =
        static_cast<double>(epoch) * static_cast<double>(spec.steps_per_epoch) + static_cast<double>(step);
    const double progress = total > 0 ? std::min(1.0, done / total) : 1.0;
    return spec.base_lr * 0.5 * (1.0 + std::cos(M_PI * progress));
  }
  return spec.base_lr;
}

}  // namespace

double learning_rate_at(const ScheduleSpec& spec, int epoch, std::int64_t step) {
  const double rate = scheduled_rate(spec, epoch, step);
  if (spec.warmup_steps <= 0.0) return rate;
  // Step k (0-based over the run) gets (k + 1) / warmup_steps of the rate: never 0, full rate at the end.
  const double done = static_cast<double>(epoch) * static_cast<double>(spec.steps_per_epoch) +
                      static_cast<double>(step) + 1.0;
  return rate * std::min(1.0, done / spec.warmup_steps);
}

}  // namespace ipj::train
