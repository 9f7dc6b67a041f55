// Learning-rate schedules: none (constant), step (x gamma every step_size epochs), cosine (per step, to 0),
// each optionally with a linear warmup over the first optimizer steps (large batches at linearly scaled
// rates).
#pragma once

#include <cstdint>

#include "ipj/train/training_choices.hpp"

namespace ipj::train {

struct ScheduleSpec {
  ScheduleKind kind = ScheduleKind::none;
  double base_lr = 0.01;
  int total_epochs = 1;
  std::int64_t steps_per_epoch = 1;
  int step_size = 0;  // 0 = max(1, total_epochs / 3)
  double gamma = 0.1;
  double warmup_steps = 0.0;  // the rate ramps linearly up to the schedule's over these steps (0 = none)
};

// Learning rate for optimizer step `step` (0-based) of epoch `epoch` (0-based).
double learning_rate_at(const ScheduleSpec& spec, int epoch, std::int64_t step);

}  // namespace ipj::train
