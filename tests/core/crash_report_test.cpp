// The fatal-signal report: a crashing child writes which signal, the thread and a backtrace with its frames
// to stderr and still dies by that signal (gtest death tests fork the child).
#include "ipj/core/crash_report.hpp"

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>

namespace {

// Not inlined: a real fault in a frame of its own.
__attribute__((noinline)) void read_through_null_pointer() {
  std::atomic<int*> pointer{nullptr};
  [[maybe_unused]] volatile int value = *pointer.load();
}

}  // namespace

#if !defined(__SANITIZE_ADDRESS__)
TEST(CrashReport, SegfaultNamesSignalThreadAndFramesThenDiesBySignal) {
  testing::GTEST_FLAG(death_test_style) = "threadsafe";
  EXPECT_EXIT(
      {
        ipj::install_crash_report("crash-test");
        read_through_null_pointer();
      },
      testing::KilledBySignal(SIGSEGV),
      "crash-test: crashed: SIGSEGV \\(invalid memory access\\) in thread [0-9]+ of process [0-9]+.*"
      "backtrace:\n.*\\[0x[0-9a-f]+\\]\n.*\\(end of backtrace\\)");
}

TEST(CrashReport, AbortIsReportedAndKeepsItsSignal) {
  testing::GTEST_FLAG(death_test_style) = "threadsafe";
  EXPECT_EXIT(
      {
        ipj::install_crash_report("crash-test");
        std::abort();
      },
      testing::KilledBySignal(SIGABRT), "crashed: SIGABRT.*\\[0x[0-9a-f]+\\]\n.*\\(end of backtrace\\)");
}
#endif
