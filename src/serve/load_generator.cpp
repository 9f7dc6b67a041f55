// Client threads with keep-alive connections, per-request latency records, windowed stability check.
#include "ipj/serve/load_generator.hpp"

#include <httplib.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <thread>

#include "ipj/core/error.hpp"
#include "ipj/infer/latency_bench.hpp"

namespace ipj::serve {
namespace {

using Clock = std::chrono::steady_clock;

struct Record {
  double finished_s;  // since the level started
  double latency_ms;
  int status;  // HTTP status, 0 = connection error
};

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

LoadLevel run_level(const LoadOptions& options, const Body& body, int concurrency, const std::string& path) {
  std::mutex mutex;
  std::vector<Record> records;
  std::atomic<bool> stop{false};
  const auto start = Clock::now();
  std::vector<std::thread> clients;
  for (int index = 0; index < concurrency; ++index) {
    clients.emplace_back([&] {
      httplib::Client client(options.url);
      client.set_keep_alive(true);
      client.set_tcp_nodelay(true);
      client.set_read_timeout(60, 0);
      std::vector<Record> local;
      while (!stop) {
        const auto sent = Clock::now();
        const auto result = client.Post(path, body.headers, body.content, body.content_type);
        const auto done = Clock::now();
        local.push_back({std::chrono::duration<double>(done - start).count(),
                         std::chrono::duration<double, std::milli>(done - sent).count(),
                         result ? result->status : 0});
        if (local.size() >= 256) {
          std::lock_guard<std::mutex> lock(mutex);
          records.insert(records.end(), local.begin(), local.end());
          local.clear();
        }
      }
      std::lock_guard<std::mutex> lock(mutex);
      records.insert(records.end(), local.begin(), local.end());
    });
  }
  const double window_s = options.duration_s / 3.0;
  std::vector<double> throughput;
  LoadLevel level;
  level.concurrency = concurrency;
  const double warmup_s = std::min(0.5, window_s);
  std::this_thread::sleep_for(std::chrono::duration<double>(warmup_s));
  auto count_between = [&](double from, double to) {
    std::lock_guard<std::mutex> lock(mutex);
    std::int64_t count = 0;
    for (const Record& record : records)
      if (record.finished_s >= from && record.finished_s < to && record.status == 200) ++count;
    return count;
  };
  while (level.windows < options.max_windows) {
    const double from = warmup_s + level.windows * window_s;
    std::this_thread::sleep_until(start + std::chrono::duration<double>(from + window_s + 0.05));
    throughput.push_back(static_cast<double>(count_between(from, from + window_s)) / window_s);
    ++level.windows;
    if (throughput.size() >= 3) {
      const auto last = throughput.end() - 3;
      const double low = *std::min_element(last, throughput.end());
      const double high = *std::max_element(last, throughput.end());
      const double mean = (throughput.end()[-1] + throughput.end()[-2] + throughput.end()[-3]) / 3.0;
      if (mean > 0 && (high - low) / mean <= options.tolerance) {
        level.stable = true;
        break;
      }
    }
  }
  stop = true;
  for (std::thread& client : clients)
    client.join();
  const double report_from = warmup_s + (level.windows - std::min(level.windows, 3)) * window_s;
  const double report_to = warmup_s + level.windows * window_s;
  std::vector<double> latencies;
  for (const Record& record : records) {
    if (record.finished_s < report_from || record.finished_s >= report_to) continue;
    if (record.status == 200) {
      latencies.push_back(record.latency_ms);
    } else {
      level.errors += 1;
      level.errors_by_status[record.status] += 1;
    }
  }
  const double span = report_to - report_from;
  level.requests = static_cast<std::int64_t>(latencies.size());
  level.requests_per_s = span > 0 ? static_cast<double>(level.requests) / span : 0.0;
  level.inferences_per_s = level.requests_per_s * static_cast<double>(options.batch);
  level.p50_ms = infer::quantile(latencies, 0.50);
  level.p90_ms = infer::quantile(latencies, 0.90);
  level.p99_ms = infer::quantile(latencies, 0.99);
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
          {"stable", level.stable}};
}

std::vector<LoadLevel> run_load(const LoadOptions& options, bool show_progress) {
  if (options.model.empty()) fail(ErrorCategory::usage, "--model NAME is required");
  if (options.duration_s <= 0) fail(ErrorCategory::usage, "--duration must be > 0 seconds");
  if (options.batch < 1) fail(ErrorCategory::usage, "--batch must be >= 1");
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
  const Body body = make_body(Json::parse(metadata->body), options);
  const std::string path = "/v2/models/" + options.model + "/infer";
  std::vector<LoadLevel> levels;
  for (const int concurrency : options.concurrency) {
    if (concurrency < 1) fail(ErrorCategory::usage, "--concurrency values must be >= 1");
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
