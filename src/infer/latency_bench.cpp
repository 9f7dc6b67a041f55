// The measurement loop behind `ipj bench`; one synthetic input per batch size (values do not change the
// work).
#include "ipj/infer/latency_bench.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <deque>
#include <numeric>

#include "graph_models.hpp"
#include "ipj/core/error.hpp"
#include "ipj/device/cpu_info.hpp"
#include "ipj/energy/meter.hpp"
#include "ipj/infer/onednn_runtime.hpp"
#include "ipj/infer/xnnpack_runtime.hpp"

namespace ipj::infer {
namespace {

using Clock = std::chrono::steady_clock;

struct Window {
  std::vector<double> latencies_ms;
  double wall_s = 0.0;
  double cpu_s = 0.0;               // this process's CPU seconds in the window
  std::uint64_t xnnpack_calls = 0;  // the window's calls an XNNPACK runtime answered
  std::uint64_t onednn_calls = 0;   // and a oneDNN runtime
  double energy_j = 0.0;
  int energy_samples = 0;
  energy::ReportedSource energy_source;
  std::string energy_model;
  double throughput(std::int64_t batch) const {
    return wall_s > 0 ? static_cast<double>(latencies_ms.size() * batch) / wall_s : 0.0;
  }
};

// Refuses a batch whose input tensor (float32 `shape`) could not fit twice in the memory available now: a
// clear error naming --batch instead of an allocation failure (or the OOM killer) in the middle of a run.
void require_batch_fits(const std::vector<std::int64_t>& shape) {
  double bytes = 4.0;
  for (const std::int64_t size : shape)
    bytes *= static_cast<double>(size);
  const double available = static_cast<double>(device::available_memory_bytes());
  if (2.0 * bytes > available) {
    char text[160];
    std::snprintf(text, sizeof text,
                  "--batch %lld needs %.3g GiB for its input alone, %.3g GiB are available",
                  static_cast<long long>(shape.front()), bytes / (1u << 30), available / (1u << 30));
    fail(ErrorCategory::usage, std::string(text) + "; use a smaller --batch");
  }
}

}  // namespace

double quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double position = q * static_cast<double>(values.size() - 1);
  const auto lower = static_cast<std::size_t>(position);
  const std::size_t upper = std::min(lower + 1, values.size() - 1);
  const double fraction = position - static_cast<double>(lower);
  return values[lower] + (values[upper] - values[lower]) * fraction;
}

bool windows_agree(const std::vector<double>& throughputs, int count, double tolerance) {
  if (count < 1 || throughputs.size() < static_cast<std::size_t>(count)) return false;
  const auto first = throughputs.end() - count;
  const double low = *std::min_element(first, throughputs.end());
  const double high = *std::max_element(first, throughputs.end());
  const double mean = std::accumulate(first, throughputs.end(), 0.0) / static_cast<double>(count);
  return mean > 0 && (high - low) / mean <= tolerance;
}

Json to_json(const BenchRow& row) {
  Json windows = Json::array();
  for (const BenchRow::WindowStats& window : row.window_stats)
    windows.push_back({{"throughput_per_s", window.throughput_per_s},
                       {"p50_ms", window.p50_ms},
                       {"p99_ms", window.p99_ms},
                       {"j_per_1000", !row.energy_source ? Json(nullptr) : Json(window.j_per_1000)}});
  return {
      {"variant", row.variant},
      {"batch", row.batch},
      {"p50_ms", row.p50_ms},
      {"p90_ms", row.p90_ms},
      {"p99_ms", row.p99_ms},
      {"mean_ms", row.mean_ms},
      {"cpu_ms_per_call", row.cpu_ms_per_call},
      {"calls", row.calls},
      {"xnnpack_calls", row.xnnpack_calls},
      {"onednn_calls", row.onednn_calls},
      {"throughput_per_s", row.throughput_per_s},
      {"j_per_1000", !row.energy_source ? Json(nullptr) : Json(row.j_per_1000)},
      {"energy_source", energy::reported_source_name(row.energy_source)},
      {"windows", row.windows},
      {"stable", row.stable},
      {"parameter_bytes", row.parameter_bytes},
      {"test_acc", row.test_acc ? Json(*row.test_acc) : Json(nullptr)},
      {"window_stats", windows},
      {"energy_window_s", !row.energy_source ? Json(nullptr) : Json(row.energy_window_s)},
      {"energy_samples", !row.energy_source ? Json(nullptr) : Json(row.energy_samples)},
      {"energy_sample_hz",
       !row.energy_source || row.energy_window_s <= 0
           ? Json(nullptr)
           : Json((row.energy_samples - static_cast<double>(row.window_stats.size())) / row.energy_window_s)},
      {"energy_model", row.energy_model}};
}

BenchRow run_latency_bench(const InferenceModel& model, std::int64_t batch, const BenchOptions& options,
                           energy::EnergyMonitor* monitor) {
  if (model.sample_shape.empty())
    fail(ErrorCategory::usage,
         "the input shape of '" + model.path + "' is unknown: give --input-shape, e.g. 1,28,28");
  if (batch < 1) fail(ErrorCategory::usage, "batch sizes must be >= 1");
  const std::vector<std::int64_t> shape = batch_shape(batch, model.sample_shape);
  require_batch_fits(shape);
  torch::manual_seed(0);
  const torch::Tensor input = torch::rand(shape);  // [B, ...] in [0, 1): pixel-like

  const auto warmup_end = Clock::now() + std::chrono::duration<double>(options.warmup_s);
  do {
    model.forward(input);
  } while (Clock::now() < warmup_end);

  std::deque<Window> recent;
  int windows = 0;
  bool stable = false;
  while (windows < options.max_windows && !stable) {
    Window window;
    if (monitor) monitor->begin_window("bench");
    const double cpu_start_s = energy::process_cpu_seconds();
    const std::uint64_t xnnpack_start = xnnpack_runtime_calls(), onednn_start = onednn_runtime_calls();
    const auto start = Clock::now();
    const auto end = start + std::chrono::duration<double>(options.window_s);
    auto call_start = start;
    do {
      model.forward(input);
      const auto call_end = Clock::now();
      window.latencies_ms.push_back(std::chrono::duration<double, std::milli>(call_end - call_start).count());
      call_start = call_end;
    } while (call_start < end);
    window.wall_s = std::chrono::duration<double>(call_start - start).count();
    window.cpu_s = energy::process_cpu_seconds() - cpu_start_s;
    window.xnnpack_calls = xnnpack_runtime_calls() - xnnpack_start;
    window.onednn_calls = onednn_runtime_calls() - onednn_start;
    if (monitor) {
      const energy::Measurement measured = monitor->end_window("bench");
      window.energy_j = measured.energy_j;
      window.energy_source = measured.devices.empty() ? energy::ReportedSource() : measured.source;
      window.energy_samples = measured.samples;
      for (const auto& device : measured.devices)
        if (device.in_total && !device.model.empty())
          window.energy_model += (window.energy_model.empty() ? "" : "; ") + device.model;
    }
    ++windows;
    recent.push_back(std::move(window));
    if (static_cast<int>(recent.size()) > options.stable_windows) recent.pop_front();
    std::vector<double> throughputs;
    for (const Window& kept : recent)
      throughputs.push_back(kept.throughput(batch));
    stable = windows_agree(throughputs, options.stable_windows, options.tolerance);
  }

  BenchRow row;
  row.variant = choice_name(model.variant);
  row.batch = batch;
  row.windows = windows;
  row.stable = stable;
  row.parameter_bytes = model.parameter_bytes;
  std::vector<double> latencies;
  double wall_s = 0.0, energy_j = 0.0, cpu_s = 0.0;
  energy::ReportedSource source;
  for (const Window& kept : recent) {
    latencies.insert(latencies.end(), kept.latencies_ms.begin(), kept.latencies_ms.end());
    wall_s += kept.wall_s;
    cpu_s += kept.cpu_s;
    row.xnnpack_calls += static_cast<std::int64_t>(kept.xnnpack_calls);
    row.onednn_calls += static_cast<std::int64_t>(kept.onednn_calls);
    energy_j += kept.energy_j;
    source = kept.energy_source;
    row.energy_samples += kept.energy_samples;
    row.energy_model = kept.energy_model;
    const double window_inferences = static_cast<double>(kept.latencies_ms.size() * batch);
    row.window_stats.push_back({kept.throughput(batch), quantile(kept.latencies_ms, 0.50),
                                quantile(kept.latencies_ms, 0.99),
                                window_inferences > 0 ? kept.energy_j / window_inferences * 1000.0 : 0.0});
  }
  row.calls = static_cast<std::int64_t>(latencies.size());
  row.cpu_ms_per_call = row.calls > 0 ? cpu_s * 1000.0 / static_cast<double>(row.calls) : 0.0;
  row.p50_ms = quantile(latencies, 0.50);
  row.p90_ms = quantile(latencies, 0.90);
  row.p99_ms = quantile(latencies, 0.99);
  row.mean_ms =
      latencies.empty() ? 0.0 : std::accumulate(latencies.begin(), latencies.end(), 0.0) / latencies.size();
  const double inferences = static_cast<double>(row.calls * batch);
  row.throughput_per_s = wall_s > 0 ? inferences / wall_s : 0.0;
  row.energy_source = source;
  row.j_per_1000 = inferences > 0 ? energy_j / inferences * 1000.0 : 0.0;
  row.energy_window_s = wall_s;
  return row;
}

}  // namespace ipj::infer
