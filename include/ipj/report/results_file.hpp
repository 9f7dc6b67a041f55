// Reading ipj results files for `ipj report` and `ipj gate`: any `--json` object or results file with a
// "kind" (train, train-repeat, compare, quantize, prune, distill, bench, load, measure). Kinds are pluggable:
// a new one (e.g. `tune`) registers a handler that turns its JSON into a Section. Unknown keys are ignored.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ipj/core/json_io.hpp"
#include "ipj/report/report_model.hpp"

namespace ipj::report {

struct ResultsFile {
  std::string path;  // as given (a run folder resolves to its results.json / compare.json)
  std::string kind;
  Json json;
};

// Turns one file's JSON into a Section; throws Error(invalid_input) naming the file and key it cannot read.
using SectionBuilder = std::function<Section(const ResultsFile&)>;

struct KindHandler {
  std::string kind;  // the value of "kind" in the file
  SectionBuilder build;
};

// Adds (or replaces) the handler of a kind. The built-in kinds are registered on first use.
void register_kind(KindHandler handler);
// The handler of `kind`, or nullptr.
const KindHandler* find_kind(const std::string& kind);
std::vector<std::string> known_kinds();

// Reads and checks a results file: io error (exit 4) when unreadable, invalid_input (exit 3) when it is not
// JSON, not an object, written by a newer schema, or of an unknown kind. A folder resolves to the
// results.json, compare.json or repeat.json inside it. `ipj measure --json` objects written before they
// carried a kind are recognised by their keys.
ResultsFile load_results_file(const std::string& path);

// load_results_file + the kind's builder; the section's path is the file's.
Section build_section(const ResultsFile& file);

}  // namespace ipj::report
