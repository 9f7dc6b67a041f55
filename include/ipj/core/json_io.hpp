// JSON for ipj: one ordered JSON type (keys keep insertion order in results), atomic JSON file writes,
// the schema version that every results file carries, and bounded reads: every JSON text ipj parses from a
// file is size- and depth-checked before nlohmann::json sees it (its copy and dump recurse per level).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace ipj {

using Json = nlohmann::ordered_json;

// Version of the results-file layout; bump on any incompatible change (documented in docs/RESULTS.md).
inline constexpr int kResultsSchemaVersion = 1;

// Bounds on a JSON text read from a file: its size in bytes and how deep objects and arrays may nest.
struct JsonLimits {
  std::uint64_t max_bytes;
  int max_depth;
};
// Results, recipes, tune files, metadata inside archives: files ipj writes (nesting under 10 levels).
inline constexpr JsonLimits kJsonFileLimits{std::uint64_t{64} << 20, 64};
// Hand-written configuration such as a model repository's config.json (docs/SERVING.md).
inline constexpr JsonLimits kConfigFileLimits{std::uint64_t{1} << 20, 32};

// Writes `value` (pretty-printed, trailing newline) to `path` atomically; an object gets a last key
// "checksum" (xxh64 of the text, core/checked_file.hpp).
void write_json_file(const std::string& path, const Json& value);
// Reads and parses a JSON file within `limits` (checked before parsing; a device, FIFO or folder is refused
// unread, see read_file); throws ipj::Error(io / invalid_input) naming the file and the parse error, the
// limit it exceeds, or a checksum that does not match (a damaged file). Returns the object without its
// "checksum" key; files without one (older or hand-written) are accepted.
Json read_json_file(const std::string& path, const JsonLimits& limits = kJsonFileLimits);

// Throws Error(invalid_input) naming `where` (e.g. "'runs/x/results.json'") when objects and arrays in `text`
// nest deeper than `max_depth`. One pass, no allocation, whatever the text holds (strings and escapes are
// skipped; it does not validate the rest of the grammar).
void check_json_depth(std::string_view text, int max_depth, const std::string& where);
// Parses `text` after checking it against `limits`; Error(invalid_input) naming `where` for a text too large,
// too deep or not JSON.
Json parse_json_text(std::string_view text, const std::string& where,
                     const JsonLimits& limits = kJsonFileLimits);

}  // namespace ipj
