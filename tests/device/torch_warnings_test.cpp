// LibTorch warnings through ipj's handler: each distinct warning reaches the log once, repeats are counted
// but not shown (a model that warns on every forward must not flood a server's log).
#include <c10/util/Exception.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <sstream>
#include <string>

#include "ipj/core/torch_compat.hpp"
#include "ipj/device/torch_warnings.hpp"

namespace ipj::device {
namespace {

std::size_t occurrences(const std::string& text, const std::string& part) {
  std::size_t count = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1))
    ++count;
  return count;
}

TEST(TorchWarnings, EachDistinctWarningIsShownOnceAndRepeatsAreCounted) {
  std::ostringstream log;
  const std::shared_ptr<spdlog::logger> previous = spdlog::default_logger();
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(log)));
  c10::WarningHandler* const saved = compat::get_warning_handler();
  show_each_torch_warning_once();
  const std::size_t before = torch_warnings_seen();
  for (int repeat = 0; repeat < 3; ++repeat) {
    TORCH_WARN("ipj test warning A");  // one source line: the same warning three times
  }
  TORCH_WARN("ipj test warning B");
  // a warning carrying a caught error's C++ backtrace (LibTorch's own for OMP_NUM_THREADS=0) loses the frames
  TORCH_WARN(
      "ipj test warning C\nException raised from get_env_num_threads at x.cpp:32\nframe #0: f() + 0x9e");
  // LibTorch's internal out= resize deprecation (a new message per shape): debug level only
  TORCH_WARN(
      "An output with one or more elements was resized since it had shape [8192], which does not match");
  compat::set_warning_handler(saved);
  spdlog::set_default_logger(previous);
  const std::string text = log.str();
  EXPECT_EQ(occurrences(text, "ipj test warning A"), 1u) << text;
  EXPECT_EQ(occurrences(text, "ipj test warning B"), 1u) << text;
  EXPECT_EQ(occurrences(text, "ipj test warning C (repeats of this warning are not shown)"), 1u) << text;
  EXPECT_EQ(occurrences(text, "frame #0"), 0u) << text;
  EXPECT_EQ(occurrences(text, "repeats of this warning are not shown"), 3u) << text;
  EXPECT_EQ(occurrences(text, "was resized"), 0u) << text;
  EXPECT_EQ(torch_warnings_seen() - before, 6u);
}

}  // namespace
}  // namespace ipj::device
