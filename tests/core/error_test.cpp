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

TEST(Error, CauseIsTheLineThatNamesWhatFailed) {
  // A TorchScript interpreter error: the model's traceback, then its own error line.
  EXPECT_EQ(error_cause("The following operation failed in the TorchScript interpreter.\n"
                        "Traceback of TorchScript (most recent call last):\n  File \"code.py\", line 3\n"
                        "RuntimeError: mat1 and mat2 shapes cannot be multiplied (8x4 and 3x4)\n"),
            "RuntimeError: mat1 and mat2 shapes cannot be multiplied (8x4 and 3x4)");
  // LibTorch's C++ error: the message first, then the backtrace.
  EXPECT_EQ(error_cause("max(): Expected reduction dim to be specified for input.numel() == 0.\n"
                        "Exception raised from max at aten/src/ATen/native/ReduceOps.cpp:1\n"
                        "frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x1"),
            "max(): Expected reduction dim to be specified for input.numel() == 0.");
  EXPECT_EQ(error_cause("one line"), "one line");
  EXPECT_EQ(error_cause(""), "");
}

}  // namespace ipj
