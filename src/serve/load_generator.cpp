// Client threads with keep-alive connections, per-request latency records, windowed stability check.
#include "ipj/serve/load_generator.hpp"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "ipj/core/error.hpp"
#include "ipj/infer/latency_bench.hpp"

namespace ipj::serve {
namespace {

using Clock = std::chrono::steady_clock;

struct Record {
  double finished_s;  // since the level started
  double latency_ms;
  int status;              // HTTP status, 0 = connection error
  double energy_j = -1;    // the response's parameters.energy_j; < 0 = absent
  int energy_source = -1;  // index into the level's source names
};

// parameters.energy_j / energy_source of a KServe v2 answer (JSON body, or the JSON header of a binary one).
std::pair<double, std::string> response_energy(const httplib::Response& response) {
  std::size_t length = response.body.size();
  if (response.has_header("Inference-Header-Content-Length")) {
    try {
      length = std::min<std::size_t>(
          length, std::stoull(response.get_header_value("Inference-Header-Content-Length")));
    } catch (const std::exception&) {
      return {-1.0, ""};
    }
  }
  const Json parsed = Json::parse(
      response.body.begin(), response.body.begin() + static_cast<std::ptrdiff_t>(length), nullptr, false);
  if (!parsed.is_object() || !parsed.contains("parameters")) return {-1.0, ""};
  const Json& parameters = parsed["parameters"];
  if (!parameters.is_object() || !parameters.contains("energy_j") || !parameters["energy_j"].is_number())
    return {-1.0, ""};
  const std::string source = parameters.contains("energy_source") && parameters["energy_source"].is_string()
                                 ? parameters["energy_source"].get<std::string>()
                                 : "unknown";
  return {parameters["energy_j"].get<double>(), source};
}

struct Body {
  std::string content;
  std::string content_type;
  httplib::Headers headers;
};

Body make_body(const Json& metadata, const LoadOptions& options) {
  const Json& input = metadata.at("inputs").at(0);
  std::vector<std::int64_t> shape = input.at("shape").get<std::vector<std::int64_t>>();
  if (!shape.empty() && shape[0] == -1) shape[0] = options.batch;
  std::int64_t count = 1;
  for (auto& dim : shape) {
    if (dim == -1) dim = 1;
    if (dim < 1 || count > (std::int64_t{1} << 26) / dim)
      fail(ErrorCategory::usage, "--batch " + std::to_string(options.batch) +
                                     " makes requests above 64 Mi values; use a smaller --batch");
    count *= dim;
  }
  std::mt19937 generator(7);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  std::vector<float> values(static_cast<std::size_t>(count));
  for (float& value : values)
    value = pixel(generator);
  Json request = {{"id", "ipj-load"}};
  Json tensor = {{"name", input.at("name")}, {"datatype", input.at("datatype")}, {"shape", shape}};
  Body body;
  if (options.binary) {
    tensor["parameters"] = {{"binary_data_size", count * 4}};
    request["inputs"] = Json::array({tensor});
    request["parameters"] = {{"binary_data_output", true}};
    body.content = request.dump();
    body.headers.emplace("Inference-Header-Content-Length", std::to_string(body.content.size()));
    body.content.append(reinterpret_cast<const char*>(values.data()), values.size() * 4);
    body.content_type = "application/octet-stream";
  } else {
    tensor["data"] = values;
    request["inputs"] = Json::array({tensor});
    body.content = request.dump();
    body.content_type = "application/json";
  }
  return body;
}

// What the client threads of one level share: finished requests and the energy sources seen (under mutex).
struct LevelRecords {
  std::mutex mutex;
  std::vector<Record> records;
  std::vector<std::string> sources;

  void add(std::vector<Record>& local) {
    std::lock_guard<std::mutex> lock(mutex);
    records.insert(records.end(), local.begin(), local.end());
    local.clear();
  }
  int source_index(const std::string& source) {
    std::lock_guard<std::mutex> lock(mutex);
    const auto known = std::find(sources.begin(), sources.end(), source);
    const int index = static_cast<int>(known - sources.begin());
    if (known == sources.end()) sources.push_back(source);
    return index;
  }
  std::int64_t successes_between(double from, double to) {
    std::lock_guard<std::mutex> lock(mutex);
    std::int64_t count = 0;
    for (const Record& record : records)
      if (record.finished_s >= from && record.finished_s < to && record.status == 200) ++count;
    return count;
  }
};

// One client: a keep-alive connection sending `body` until `stop`, recording every answer.
void run_client(const LoadOptions& options, const Body& body, const std::string& path,
                Clock::time_point start, const std::atomic<bool>& stop, LevelRecords& shared) {
  httplib::Client client(options.url);
  client.set_keep_alive(true);
  client.set_tcp_nodelay(true);
  client.set_read_timeout(60, 0);
  std::vector<Record> local;
  while (!stop) {
    const auto sent = Clock::now();
    const auto result = client.Post(path, body.headers, body.content, body.content_type);
    const auto done = Clock::now();
    Record record{std::chrono::duration<double>(done - start).count(),
                  std::chrono::duration<double, std::milli>(done - sent).count(),
                  result ? result->status : 0};
    if (result && result->status == 200) {
      const auto [joules, source] = response_energy(*result);
      if (joules >= 0) {
        record.energy_j = joules;
        record.energy_source = shared.source_index(source);
      }
    }
    local.push_back(record);
    if (local.size() >= 256) shared.add(local);
  }
  shared.add(local);
}

// Latency, throughput and energy of the requests that finished in [from, to).
void summarize_level(const LoadOptions& options, const LevelRecords& shared, double from, double to,
                     LoadLevel& level) {
  std::vector<double> latencies, energies;
  std::set<int> energy_sources;
  for (const Record& record : shared.records) {
    if (record.finished_s < from || record.finished_s >= to) continue;
    if (record.status == 200) {
      latencies.push_back(record.latency_ms);
      if (record.energy_j >= 0) {
        energies.push_back(record.energy_j);
        energy_sources.insert(record.energy_source);
      }
    } else {
      level.errors += 1;
      level.errors_by_status[record.status] += 1;
    }
  }
  const double span = to - from;
  level.requests = static_cast<std::int64_t>(latencies.size());
  level.requests_per_s = span > 0 ? static_cast<double>(level.requests) / span : 0.0;
  level.inferences_per_s = level.requests_per_s * static_cast<double>(options.batch);
  level.p50_ms = infer::quantile(latencies, 0.50);
  level.p90_ms = infer::quantile(latencies, 0.90);
  level.p99_ms = infer::quantile(latencies, 0.99);
  level.energy_requests = static_cast<std::int64_t>(energies.size());
  if (energies.empty()) return;
  double sum = 0.0;
  for (const double joules : energies)
    sum += joules;
  level.energy_mean_j = sum / static_cast<double>(energies.size());
  level.energy_p50_j = infer::quantile(energies, 0.50);
  level.energy_p99_j = infer::quantile(energies, 0.99);
  for (const int source : energy_sources)
    level.energy_source +=
        (level.energy_source.empty() ? "" : "+") + shared.sources[static_cast<std::size_t>(source)];
}

// `concurrency` clients until three consecutive windows of duration/3 agree (or max_windows); reports the
// last three windows.
LoadLevel run_level(const LoadOptions& options, const Body& body, int concurrency, const std::string& path) {
  LevelRecords shared;
  std::atomic<bool> stop{false};
  const auto start = Clock::now();
  std::vector<std::thread> clients;
  for (int index = 0; index < concurrency; ++index)
    clients.emplace_back([&] { run_client(options, body, path, start, stop, shared); });
  const double window_s = options.duration_s / 3.0;
  std::vector<double> throughput;
  LoadLevel level;
  level.concurrency = concurrency;
  const double warmup_s = std::min(0.5, window_s);
  std::this_thread::sleep_for(std::chrono::duration<double>(warmup_s));
  while (level.windows < options.max_windows) {
    const double from = warmup_s + level.windows * window_s;
    std::this_thread::sleep_until(start + std::chrono::duration<double>(from + window_s + 0.05));
    throughput.push_back(static_cast<double>(shared.successes_between(from, from + window_s)) / window_s);
    ++level.windows;
    if (infer::windows_agree(throughput, 3, options.tolerance)) {
      level.stable = true;
      break;
    }
  }
  stop = true;
  for (std::thread& client : clients)
    client.join();
  const double report_from = warmup_s + (level.windows - std::min(level.windows, 3)) * window_s;
  summarize_level(options, shared, report_from, warmup_s + level.windows * window_s, level);
  return level;
}

}  // namespace

Json to_json(const LoadLevel& level) {
  Json errors = Json::object();
  for (const auto& [status, count] : level.errors_by_status)
    errors[std::to_string(status)] = count;
  return {{"concurrency", level.concurrency},
          {"requests_per_s", level.requests_per_s},
          {"inferences_per_s", level.inferences_per_s},
          {"p50_ms", level.p50_ms},
          {"p90_ms", level.p90_ms},
          {"p99_ms", level.p99_ms},
          {"requests", level.requests},
          {"errors", level.errors},
          {"errors_by_status", errors},
          {"windows", level.windows},
          {"stable", level.stable},
          {"energy_requests", level.energy_requests},
          {"energy_mean_j", level.energy_mean_j},
          {"energy_p50_j", level.energy_p50_j},
          {"energy_p99_j", level.energy_p99_j},
          {"energy_source", level.energy_source.empty() ? Json() : Json(level.energy_source)}};
}

void validate_url(const std::string& url) {
  const std::string scheme = "http://";
  if (url.compare(0, scheme.size(), scheme) != 0)
    fail(ErrorCategory::usage,
         "--url '" + url + "': only http://HOST[:PORT] is supported (e.g. http://127.0.0.1:8000)");
  const std::string rest = url.substr(scheme.size());
  const std::size_t slash = rest.find('/');
  if (slash != std::string::npos && slash + 1 != rest.size())
    fail(ErrorCategory::usage, "--url '" + url + "': give the server's base URL without a path");
  const std::string authority = rest.substr(0, slash);
  const std::size_t colon = authority.rfind(':');
  const bool bracketed = !authority.empty() && authority.back() == ']';
  const std::string host = colon == std::string::npos || bracketed ? authority : authority.substr(0, colon);
  if (host.empty()) fail(ErrorCategory::usage, "--url '" + url + "' names no host");
  if (colon != std::string::npos && !bracketed) {
    const std::string port = authority.substr(colon + 1);
    int value = -1;
    const auto parsed = std::from_chars(port.data(), port.data() + port.size(), value);
    if (parsed.ec != std::errc() || parsed.ptr != port.data() + port.size() || value < 1 || value > 65535)
      fail(ErrorCategory::usage, "--url '" + url + "': the port must be in 1..65535");
  }
}

std::vector<LoadLevel> run_load(const LoadOptions& options, bool show_progress) {
  validate_url(options.url);
  if (options.model.empty()) fail(ErrorCategory::usage, "--model NAME is required");
  if (!(options.duration_s > 0) || options.duration_s > 86400)
    fail(ErrorCategory::usage, "--duration must be in (0, 86400] seconds");
  if (options.max_windows < 1) fail(ErrorCategory::usage, "--max-windows must be >= 1");
  if (options.batch < 1 || options.batch > (std::int64_t{1} << 20))
    fail(ErrorCategory::usage, "--batch must be in [1, 1048576] rows");
  if (options.concurrency.empty()) fail(ErrorCategory::usage, "--concurrency needs at least one value");
  for (const int concurrency : options.concurrency)
    if (concurrency < 1 || concurrency > 4096)
      fail(ErrorCategory::usage,
           "--concurrency values must be in [1, 4096], got " + std::to_string(concurrency));
  httplib::Client probe(options.url);
  probe.set_connection_timeout(5, 0);
  const auto metadata = probe.Get("/v2/models/" + options.model);
  if (!metadata)
    fail(ErrorCategory::io, "cannot reach " + options.url + " (" + httplib::to_string(metadata.error()) +
                                "); is `ipj serve` running there?");
  if (metadata->status == 404)
    fail(ErrorCategory::invalid_input, "the server has no model '" + options.model + "'");
  if (metadata->status != 200)
    fail(ErrorCategory::io,
         "GET /v2/models/" + options.model + " answered " + std::to_string(metadata->status));
  Body body;
  try {
    body = make_body(Json::parse(metadata->body), options);
  } catch (const Json::exception& error) {
    fail(ErrorCategory::invalid_input,
         "GET /v2/models/" + options.model + " did not answer KServe v2 model metadata: " + error.what());
  }
  const std::string path = "/v2/models/" + options.model + "/infer";
  std::vector<LoadLevel> levels;
  for (const int concurrency : options.concurrency) {
    levels.push_back(run_level(options, body, concurrency, path));
    const LoadLevel& level = levels.back();
    if (show_progress)
      spdlog::info("concurrency {}: {:.0f} req/s, p50 {:.3f} ms, p99 {:.3f} ms, {} errors{}", concurrency,
                   level.requests_per_s, level.p50_ms, level.p99_ms, level.errors,
                   level.stable ? "" : " (unstable)");
  }
  return levels;
}

}  // namespace ipj::serve
