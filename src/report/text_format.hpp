// Number and text formatting shared by the report renderers: significant digits, signed percentages, and
// HTML escaping of everything that comes from a file. Private to src/report.
#pragma once

#include <string>

namespace ipj::report {

// `digits` significant digits without exponents for everyday magnitudes: 26310, 4.241, 0.001180.
std::string significant(double value, int digits = 4);
// printf("%.*f").
std::string fixed(double value, int decimals);
// "+3.2%" / "-10.0%" for a relative change (0.032 -> "+3.2%").
std::string signed_percent(double fraction);
// A value with its unit: "12.5 ms", "0.8814" (no unit).
std::string with_unit(double value, const std::string& unit, int digits = 4);
// True when the text starts like a number ("12.5 ms", "-3%", ".5"): such cells are right-aligned.
bool looks_numeric(const std::string& text);
// Escapes & < > " ' so that text from files can never become markup (element content and attributes).
std::string html_escape(const std::string& text);
// Escapes | and newlines for a Markdown table cell, and neutralises HTML (GitHub renders inline HTML).
std::string markdown_cell(const std::string& text);

}  // namespace ipj::report
