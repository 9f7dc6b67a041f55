// Display text of single numbers (snprintf into a fixed buffer).
#include "ipj/core/number_format.hpp"

#include <cstdio>

namespace ipj {

std::string format_number(const char* pattern, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, pattern, value);
  return buffer;
}

std::string format_number(const Json& value, const char* pattern, const char* missing) {
  return value.is_number() ? format_number(pattern, value.get<double>()) : std::string(missing);
}

}  // namespace ipj
