// ipj::Error categories map to stable, distinct exit codes.
#include <gtest/gtest.h>

#include <set>

#include "ipj/core/error.hpp"

namespace ipj {

TEST(Error, CategoriesHaveDistinctNonZeroExitCodes) {
  std::set<int> codes;
  for (auto category : {ErrorCategory::usage, ErrorCategory::invalid_input, ErrorCategory::io,
                        ErrorCategory::unsupported, ErrorCategory::runtime, ErrorCategory::internal}) {
    const int code = exit_code_for(category);
    EXPECT_NE(code, 0) << category_name(category);
    codes.insert(code);
  }
  EXPECT_EQ(codes.size(), 6u);
  EXPECT_EQ(exit_code_for(ErrorCategory::usage), 2);
}

TEST(Error, FailThrowsWithCategoryAndMessage) {
  try {
    fail(ErrorCategory::io, "cannot read 'x'");
    FAIL() << "fail() returned";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::io);
    EXPECT_STREQ(error.what(), "cannot read 'x'");
  }
}

}  // namespace ipj
