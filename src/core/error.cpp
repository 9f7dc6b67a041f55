// Exit codes and names for ipj::Error categories.
#include "ipj/core/error.hpp"

namespace ipj {

int exit_code_for(ErrorCategory category) noexcept {
  switch (category) {
    case ErrorCategory::usage:
      return 2;
    case ErrorCategory::invalid_input:
      return 3;
    case ErrorCategory::io:
      return 4;
    case ErrorCategory::unsupported:
      return 5;
    case ErrorCategory::runtime:
      return 6;
    case ErrorCategory::internal:
      return 70;
  }
  return 70;
}

const char* category_name(ErrorCategory category) noexcept {
  switch (category) {
    case ErrorCategory::usage:
      return "usage";
    case ErrorCategory::invalid_input:
      return "invalid_input";
    case ErrorCategory::io:
      return "io";
    case ErrorCategory::unsupported:
      return "unsupported";
    case ErrorCategory::runtime:
      return "runtime";
    case ErrorCategory::internal:
      return "internal";
  }
  return "internal";
}

std::string error_cause(const std::string& message) {
  const std::size_t cause = message.rfind("Error: ");
  const std::size_t start = cause == std::string::npos ? 0 : message.rfind('\n', cause) + 1;
  const std::size_t end = message.find('\n', start);
  return message.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

}  // namespace ipj
