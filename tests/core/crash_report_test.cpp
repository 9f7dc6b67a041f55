// The fatal-signal report: a crashing child writes which signal, the thread and a backtrace with its frames
// to stderr and still dies by that signal (gtest death tests fork the child).
#include "ipj/core/crash_report.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

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

// Under a finite `ulimit -v` a stack or mapping that cannot grow crashes without any bug: the report names
// the limit and asks for it to be raised first (a run at 976 MiB died in SIGSEGV asking for a bug report).
TEST(CrashReport, UnderAnAddressSpaceLimitTheReportNamesItInsteadOfABug) {
  testing::GTEST_FLAG(death_test_style) = "threadsafe";
  EXPECT_EXIT(
      {
        rlimit limit{};
        ::getrlimit(RLIMIT_AS, &limit);
        limit.rlim_cur = 64ULL << 30;  // finite, and far above what the child maps
        ::setrlimit(RLIMIT_AS, &limit);
        ipj::install_crash_report("crash-test");
        read_through_null_pointer();
      },
      testing::KilledBySignal(SIGSEGV),
      "crashed: SIGSEGV .*ulimit -v \\(RLIMIT_AS\\) holds this process to 65536 MiB.*raise ulimit -v");
}
#endif
