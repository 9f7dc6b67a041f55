// Atomic JSON file writes with a checksum, and checked, bounded JSON reads (docs/RESULTS.md).
#include "ipj/core/json_io.hpp"

#include "ipj/core/atomic_file.hpp"
#include "ipj/core/checked_file.hpp"
#include "ipj/core/error.hpp"

namespace ipj {

void write_json_file(const std::string& path, const Json& value) {
  write_file_atomically(path, seal_json_text(value));
}

void check_json_depth(std::string_view text, int max_depth, const std::string& where) {
  int depth = 0;
  bool in_string = false;
  for (std::size_t at = 0; at < text.size(); ++at) {
    const char c = text[at];
    if (in_string) {
      if (c == '\\')
        ++at;  // the escaped character cannot end the string
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth)
        fail(ErrorCategory::invalid_input,
             where + " nests objects and arrays deeper than " + std::to_string(max_depth) +
                 " levels (at byte " + std::to_string(at) +
                 "); ipj refuses it unparsed: flatten it or check that it is the right file");
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    }
  }
}

Json parse_json_text(std::string_view text, const std::string& where, const JsonLimits& limits) {
  if (text.size() > limits.max_bytes)
    fail(ErrorCategory::invalid_input, where + " is " + std::to_string(text.size()) +
                                           " bytes of JSON, more than " + std::to_string(limits.max_bytes) +
                                           "; check that it is the right file");
  check_json_depth(text, limits.max_depth, where);
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& error) {
    fail(ErrorCategory::invalid_input, where + " is not valid JSON: " + error.what());
  }
}

Json read_json_file(const std::string& path, const JsonLimits& limits) {
  const std::string text = read_file(path, limits.max_bytes);
  Json value = parse_json_text(text, "'" + path + "'", limits);
  verify_json_text(path, text, value);
  return value;
}

}  // namespace ipj
