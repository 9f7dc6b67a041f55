// printf-style formatting of single numbers for human output (tables, summaries, reports): the one place
// that turns a double into display text. JSON output keeps full precision and never goes through here.
#pragma once

#include <string>

#include "ipj/core/json_io.hpp"

namespace ipj {

// One number with a printf pattern taking one double, e.g. format_number("%.3f", 0.5) == "0.500",
// format_number("%.0f KiB", 2048.0) == "2048 KiB". Output longer than 63 characters is cut.
std::string format_number(const char* pattern, double value);
// The same for a JSON value; `missing` when it is not a number (null: not measured, not reached).
std::string format_number(const Json& value, const char* pattern, const char* missing);

}  // namespace ipj
