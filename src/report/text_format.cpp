// Formatting helpers of the report renderers.
#include "text_format.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>

#include "ipj/core/number_format.hpp"

namespace ipj::report {

std::string fixed(double value, int decimals) {
  const std::string pattern = "%." + std::to_string(decimals) + "f";
  return format_number(pattern.c_str(), value);
}

std::string significant(double value, int digits) {
  if (!std::isfinite(value)) return "n/a";
  if (value == 0.0) return "0";
  if (std::fabs(value) < 1e15 && value == std::round(value))
    return fixed(value, 0);  // counts: "64", not "64.00"
  const int magnitude = static_cast<int>(std::floor(std::log10(std::fabs(value))));
  if (magnitude >= digits - 1) return fixed(value, 0);
  if (magnitude < -6) {
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, "%.*e", digits - 1, value);
    return buffer;
  }
  return fixed(value, digits - 1 - magnitude);
}

std::string signed_percent(double fraction) {
  if (!std::isfinite(fraction)) return "n/a";
  const double percent = fraction * 100.0;
  return (percent >= 0 ? "+" : "") + fixed(percent, std::fabs(percent) < 10 ? 1 : 0) + "%";
}

std::string with_unit(double value, const std::string& unit, int digits) {
  return unit.empty() ? significant(value, digits) : significant(value, digits) + " " + unit;
}

bool looks_numeric(const std::string& text) {
  if (text.empty()) return false;
  const auto digit = [](char character) { return std::isdigit(static_cast<unsigned char>(character)) != 0; };
  if (digit(text[0])) return true;
  return (text[0] == '-' || text[0] == '+' || text[0] == '.' || text[0] == '$') && text.size() > 1 &&
         digit(text[1]);
}

std::string html_escape(const std::string& text) {
  std::string escaped;
  escaped.reserve(text.size());
  for (const char character : text) {
    switch (character) {
      case '&':
        escaped += "&amp;";
        break;
      case '<':
        escaped += "&lt;";
        break;
      case '>':
        escaped += "&gt;";
        break;
      case '"':
        escaped += "&quot;";
        break;
      case '\'':
        escaped += "&#39;";
        break;
      default:
        escaped += character;
    }
  }
  return escaped;
}

std::string markdown_cell(const std::string& text) {
  std::string cell;
  for (const char character : text) {
    if (character == '|') {
      cell += "\\|";
    } else if (character == '\n' || character == '\r') {
      cell += ' ';
    } else if (character == '<') {
      cell += "&lt;";
    } else if (character == '>') {
      cell += "&gt;";
    } else if (character == '&') {
      cell += "&amp;";
    } else {
      cell += character;
    }
  }
  return cell;
}

}  // namespace ipj::report
