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
