// Learning-rate schedules against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>

#include "ipj/train/lr_schedule.hpp"

namespace ipj::train {

TEST(LrSchedule, ConstantStepCosine) {
  ScheduleSpec spec{ScheduleKind::none, 0.1, 6, 10, 0, 0.1};
  EXPECT_DOUBLE_EQ(learning_rate_at(spec, 5, 9), 0.1);

  spec.kind = ScheduleKind::step;  // step_size 0 -> 6/3 = 2 epochs per decay
  EXPECT_DOUBLE_EQ(learning_rate_at(spec, 1, 9), 0.1);
  EXPECT_NEAR(learning_rate_at(spec, 2, 0), 0.01, 1e-15);
  EXPECT_NEAR(learning_rate_at(spec, 5, 0), 0.001, 1e-15);

  spec.kind = ScheduleKind::cosine;
  EXPECT_DOUBLE_EQ(learning_rate_at(spec, 0, 0), 0.1);
  EXPECT_NEAR(learning_rate_at(spec, 3, 0), 0.05, 1e-12);  // halfway
  EXPECT_NEAR(learning_rate_at(spec, 1, 5), 0.1 * 0.5 * (1 + std::cos(M_PI * 15.0 / 60.0)), 1e-12);
}

}  // namespace ipj::train

namespace ipj::train {

TEST(LrSchedule, LinearWarmupRampsToTheScheduledRate) {
  ScheduleSpec spec{ScheduleKind::cosine, 0.1, 2, 10, 0, 0.1, 5.0};  // warmup over the first 5 of 20 steps
  const double cosine_at_step_2 = 0.1 * 0.5 * (1 + std::cos(M_PI * 2.0 / 20.0));
  EXPECT_NEAR(learning_rate_at(spec, 0, 0), 0.1 * 1.0 / 5.0, 1e-12);  // never 0
  EXPECT_NEAR(learning_rate_at(spec, 0, 2), cosine_at_step_2 * 3.0 / 5.0, 1e-12);
  EXPECT_NEAR(learning_rate_at(spec, 0, 4), 0.1 * 0.5 * (1 + std::cos(M_PI * 4.0 / 20.0)),
              1e-12);  // full from step 5
  EXPECT_NEAR(learning_rate_at(spec, 1, 0), 0.05, 1e-12);
  spec.kind = ScheduleKind::none;
  spec.warmup_steps = 12.5;  // spans the epoch boundary
  EXPECT_NEAR(learning_rate_at(spec, 1, 1), 0.1 * 12.0 / 12.5, 1e-12);
  EXPECT_DOUBLE_EQ(learning_rate_at(spec, 1, 5), 0.1);
}

}  // namespace ipj::train
