// The thread-local log context: set for a scope, nested, restored, and not seen by other threads.
#include <gtest/gtest.h>

#include <string>
#include <thread>

#include "ipj/core/log.hpp"

namespace ipj {

TEST(LogContext, NamesTheScopesLinesNestsAndStaysOnItsThread) {
  EXPECT_EQ(log_prefix(), "");
  {
    const LogContext outer("model 'a'");
    EXPECT_EQ(log_prefix(), "model 'a': ");
    {
      const LogContext inner("model 'b'");
      EXPECT_EQ(log_context(), "model 'b'");
    }
    EXPECT_EQ(log_context(), "model 'a'");
    std::string seen_elsewhere = "unset";
    std::thread other([&] { seen_elsewhere = log_prefix(); });
    other.join();
    EXPECT_EQ(seen_elsewhere, "");  // another thread carries it only when told (LogContext there)
  }
  EXPECT_EQ(log_prefix(), "");
}

}  // namespace ipj
