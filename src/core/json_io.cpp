// Atomic JSON file writes and checked JSON reads.
#include "ipj/core/json_io.hpp"

#include "ipj/core/atomic_file.hpp"
#include "ipj/core/error.hpp"

namespace ipj {

void write_json_file(const std::string& path, const Json& value) {
  write_file_atomically(path, value.dump(2) + "\n");
}

Json read_json_file(const std::string& path) {
  const std::string text = read_file(path);
  try {
    return Json::parse(text);
  } catch (const nlohmann::json::parse_error& error) {
    fail(ErrorCategory::invalid_input, "'" + path + "' is not valid JSON: " + error.what());
  }
}

}  // namespace ipj
