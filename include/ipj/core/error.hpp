// The one error type of ipj: an exception with a category that the CLI maps to an exit code.
// The library never calls exit(); it throws ipj::Error with a message that says what, where and how to fix.
#pragma once

#include <stdexcept>
#include <string>

namespace ipj {

enum class ErrorCategory {
  usage,          // a bad flag or argument value (exit 2)
  invalid_input,  // a file or data set that is malformed (exit 3)
  io,             // a file that cannot be read or written (exit 4)
  unsupported,    // a feature this build or machine lacks (exit 5)
  runtime,        // a run that failed on its own terms, e.g. diverged to NaN (exit 6)
  internal,       // a bug in ipj (exit 70)
};

class Error : public std::runtime_error {
 public:
  Error(ErrorCategory category, const std::string& message)
      : std::runtime_error(message), category_(category) {}
  ErrorCategory category() const noexcept { return category_; }

 private:
  ErrorCategory category_;
};

// Process exit code for a category (stable: scripts rely on it; documented in docs/CLI.md).
int exit_code_for(ErrorCategory category) noexcept;
// A short lowercase name for a category, e.g. "invalid_input".
const char* category_name(ErrorCategory category) noexcept;

// The one line of an exception message that says what failed: a TorchScript interpreter error (a traceback of
// the model's code) ends with the model's own "RuntimeError: ..." line; LibTorch's C++ errors say it first
// and add a backtrace. Other messages: their first line.
std::string error_cause(const std::string& message);

[[noreturn]] inline void fail(ErrorCategory category, const std::string& message) {
  throw Error(category, message);
}

}  // namespace ipj
