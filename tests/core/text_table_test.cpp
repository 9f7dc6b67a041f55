// Text tables align columns.
#include <gtest/gtest.h>

#include "ipj/core/number_format.hpp"
#include "ipj/core/progress.hpp"
#include "ipj/core/text_table.hpp"

namespace ipj {

TEST(TextTable, AlignsColumns) {
  TextTable table({"model", "params"});
  table.add_row({"mlp", "669706"});
  table.add_row({"resnet18", "11"});
  EXPECT_EQ(table.render(),
            "model     params\n"
            "----------------\n"
            "mlp       669706\n"
            "resnet18      11\n");
}

TEST(Format, DurationsAndCounts) {
  EXPECT_EQ(format_duration(0.35), "350ms");
  EXPECT_EQ(format_duration(4.25), "4.2s");
  EXPECT_EQ(format_duration(83), "1m23s");
  EXPECT_EQ(format_count(950), "950");
  EXPECT_EQ(format_count(12345), "12.3k");
  EXPECT_EQ(format_count(1.2e6), "1.20M");
}

TEST(Format, NumbersFollowTheirPatternAndMissingValuesSaySo) {
  EXPECT_EQ(format_number("%.3f", 0.5), "0.500");
  EXPECT_EQ(format_number("%.0f KiB", 2048.4), "2048 KiB");
  EXPECT_EQ(format_number(Json(3.14159), "%.2f", "-"), "3.14");
  EXPECT_EQ(format_number(Json(7), "%.1f J", "-"), "7.0 J");
  EXPECT_EQ(format_number(Json(nullptr), "%.2f", "not reached"), "not reached");
  EXPECT_EQ(format_number(Json("0.5"), "%.2f", "-"), "-");  // text is not a number
}

}  // namespace ipj
