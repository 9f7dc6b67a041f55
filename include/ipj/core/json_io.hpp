// JSON for ipj: one ordered JSON type (keys keep insertion order in results), atomic JSON file writes,
// and the schema version that every results file carries.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace ipj {

using Json = nlohmann::ordered_json;

// Version of the results-file layout; bump on any incompatible change (documented in docs/RESULTS.md).
inline constexpr int kResultsSchemaVersion = 1;

// Writes `value` (pretty-printed, trailing newline) to `path` atomically; an object gets a last key
// "checksum" (xxh64 of the text, core/checked_file.hpp).
void write_json_file(const std::string& path, const Json& value);
// Reads and parses a JSON file; throws ipj::Error(io / invalid_input) naming the file and the parse error, or
// a checksum that does not match (a damaged file). Returns the object without its "checksum" key; files
// without one (older or hand-written) are accepted.
Json read_json_file(const std::string& path);

}  // namespace ipj
