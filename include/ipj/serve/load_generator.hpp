// `ipj load`: a closed-loop load generator for KServe v2 servers (perf_analyzer-style): at each concurrency,
// N client threads each keep one request in flight; windows repeat until the last three agree within 10%.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ipj/core/json_io.hpp"

namespace ipj::serve {

struct LoadOptions {
  std::string url = "http://127.0.0.1:8000";
  std::string model;
  std::vector<int> concurrency{1};
  double duration_s = 3.0;  // per concurrency level for three windows; more windows when unstable
  int max_windows = 6;
  double tolerance = 0.10;
  std::int64_t batch = 1;  // rows per request
  bool binary = false;     // binary tensor extension instead of JSON data
};

struct LoadLevel {
  int concurrency = 1;
  double requests_per_s = 0.0;
  double inferences_per_s = 0.0;
  double p50_ms = 0.0, p90_ms = 0.0, p99_ms = 0.0;
  std::int64_t requests = 0;  // in the reported windows
  std::int64_t errors = 0;
  std::map<int, std::int64_t> errors_by_status;  // 0 = connection error
  int windows = 0;
  bool stable = false;
  // Per-request joules from the answers' parameters.energy_j (ipj serve's energy_in_response): distribution
  // over the reported windows, and the sources seen ("estimated", ...; empty when no answer carried energy).
  std::int64_t energy_requests = 0;
  double energy_mean_j = 0.0, energy_p50_j = 0.0, energy_p99_j = 0.0;
  // Text, not energy::ReportedSource: what any KServe v2 server wrote in its answers ("unknown" when an
  // answer had energy_j without a source), the distinct values joined with "+" in order of appearance.
  std::string energy_source;
};
Json to_json(const LoadLevel& level);

// Throws ipj::Error(usage) for a URL that is not http://HOST[:PORT], (io) when the server cannot be reached,
// (invalid_input) when the model is unknown.
void validate_url(const std::string& url);
std::vector<LoadLevel> run_load(const LoadOptions& options, bool show_progress = true);

}  // namespace ipj::serve
