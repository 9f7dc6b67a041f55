// Loading results files: folder resolution, JSON and schema checks, kind detection, the kind registry.
#include "ipj/report/results_file.hpp"

#include <filesystem>
#include <mutex>

#include "ipj/core/atomic_file.hpp"
#include "ipj/core/error.hpp"
#include "ipj/core/json_io.hpp"
#include "kinds.hpp"

namespace ipj::report {
namespace {

std::vector<KindHandler>& registry() {
  static std::vector<KindHandler> handlers{
      {"train", build_train_section},     {"train-repeat", build_repeat_section},
      {"compare", build_compare_section}, {"bench", build_bench_section},
      {"load", build_load_section},       {"quantize", build_quantize_section},
      {"prune", build_prune_section},     {"distill", build_distill_section},
      {"measure", build_measure_section},
  };
  return handlers;
}

std::mutex& registry_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::string resolve_path(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::is_directory(path, error)) return path;
  for (const char* name : {"compare.json", "repeat.json", "results.json"}) {
    const std::filesystem::path candidate = std::filesystem::path(path) / name;
    if (std::filesystem::exists(candidate, error)) return candidate.string();
  }
  fail(ErrorCategory::io, "folder '" + path +
                              "' holds no results file (compare.json, repeat.json or results.json); give the "
                              "file itself or a run folder");
}

std::string kinds_list() {
  std::string list;
  for (const std::string& kind : known_kinds())
    list += (list.empty() ? "" : ", ") + kind;
  return list;
}

// `ipj measure --json` objects carried no kind before 2026-12-03: recognised by their keys.
bool looks_like_measure(const Json& json) {
  return json.contains("command") && json.contains("exit_code") && json.contains("devices") &&
         json.contains("energy_j");
}

}  // namespace

void register_kind(KindHandler handler) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (auto& existing : registry())
    if (existing.kind == handler.kind) {
      existing = std::move(handler);
      return;
    }
  registry().push_back(std::move(handler));
}

const KindHandler* find_kind(const std::string& kind) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (const auto& handler : registry())
    if (handler.kind == kind) return &handler;
  return nullptr;
}

std::vector<std::string> known_kinds() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<std::string> kinds;
  for (const auto& handler : registry())
    kinds.push_back(handler.kind);
  return kinds;
}

ResultsFile load_results_file(const std::string& path) {
  ResultsFile file;
  file.path = resolve_path(path);
  const std::string text = read_file(file.path, kJsonFileLimits.max_bytes);
  check_json_depth(text, kJsonFileLimits.max_depth, "'" + file.path + "'");
  try {
    file.json = Json::parse(text);
  } catch (const nlohmann::json::exception& error) {
    fail(ErrorCategory::invalid_input, "'" + file.path + "' is not JSON (" + error.what() +
                                           "); give a results file written by ipj, e.g. runs/x/results.json");
  }
  if (!file.json.is_object())
    fail(ErrorCategory::invalid_input,
         "'" + file.path + "' is not an ipj results file: expected a JSON object with a \"kind\"");
  const auto kind = file.json.find("kind");
  if (kind == file.json.end()) {
    if (!looks_like_measure(file.json))
      fail(ErrorCategory::invalid_input,
           "'" + file.path +
               "' is not an ipj results file: it has no \"kind\" key (ipj writes "
               "one of: " +
               kinds_list() + ")");
    file.kind = "measure";
  } else {
    if (!kind->is_string())
      fail(ErrorCategory::invalid_input, "'" + file.path + "': \"kind\" must be a string");
    file.kind = kind->get<std::string>();
  }
  const auto version = file.json.find("schema_version");
  if (version == file.json.end()) {
    if (!(file.kind == "measure" && kind == file.json.end()))
      fail(ErrorCategory::invalid_input,
           "'" + file.path + "' has no \"schema_version\": not a results file written by ipj");
  } else if (!version->is_number_integer()) {
    fail(ErrorCategory::invalid_input, "'" + file.path + "': \"schema_version\" must be an integer");
  } else if (version->get<long long>() > kResultsSchemaVersion || version->get<long long>() < 1) {
    fail(ErrorCategory::invalid_input,
         "'" + file.path + "' has schema_version " + std::to_string(version->get<long long>()) +
             "; this ipj reads version " + std::to_string(kResultsSchemaVersion) + " (update ipj)");
  }
  if (!find_kind(file.kind))
    fail(ErrorCategory::invalid_input, "'" + file.path + "' has kind '" + file.kind +
                                           "', which this ipj cannot report on (kinds: " + kinds_list() +
                                           ")");
  return file;
}

Section build_section(const ResultsFile& file) {
  const KindHandler* handler = find_kind(file.kind);
  if (!handler) fail(ErrorCategory::invalid_input, "'" + file.path + "': unknown kind '" + file.kind + "'");
  Section section = handler->build(file);
  section.kind = file.kind;
  section.path = file.path;
  return section;
}

}  // namespace ipj::report
