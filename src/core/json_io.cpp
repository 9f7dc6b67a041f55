// Atomic JSON file writes with a checksum, and checked JSON reads (docs/RESULTS.md).
#include "ipj/core/json_io.hpp"

#include "ipj/core/atomic_file.hpp"
#include "ipj/core/checked_file.hpp"
#include "ipj/core/error.hpp"

namespace ipj {

void write_json_file(const std::string& path, const Json& value) {
  write_file_atomically(path, seal_json_text(value));
}

Json read_json_file(const std::string& path) {
  const std::string text = read_file(path);
  Json value;
  try {
    value = Json::parse(text);
  } catch (const nlohmann::json::parse_error& error) {
    fail(ErrorCategory::invalid_input, "'" + path + "' is not valid JSON: " + error.what());
  }
  verify_json_text(path, text, value);
  return value;
}

}  // namespace ipj
