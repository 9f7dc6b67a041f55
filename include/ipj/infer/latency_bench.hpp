// perf_analyzer-style latency/throughput measurement of one model at one batch size: warm-up, then
// fixed-length windows repeated until the last `stable_windows` agree within `tolerance`; percentiles come
// from those windows, joules per 1000 inferences from the energy measured over exactly the same windows.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ipj/core/json_io.hpp"
#include "ipj/energy/energy_monitor.hpp"
#include "ipj/energy/measurement.hpp"
#include "ipj/infer/inference_model.hpp"

namespace ipj::infer {

struct BenchOptions {
  double warmup_s = 0.2;
  double window_s = 0.5;
  int stable_windows = 3;
  double tolerance = 0.10;  // (max - min) / mean of the window throughputs
  int max_windows = 10;
};

struct BenchRow {
  std::string variant;
  std::int64_t batch = 1;
  double p50_ms = 0.0, p90_ms = 0.0, p99_ms = 0.0, mean_ms = 0.0;  // per call (one batch)
  double throughput_per_s = 0.0;                                   // inferences (samples) per second
  double j_per_1000 = 0.0;                                         // joules per 1000 inferences
  energy::ReportedSource energy_source;                            // none: no monitor, or no meter in it
  int windows = 0;
  bool stable = false;
  std::int64_t calls = 0;  // calls inside the reported windows
  // Of those calls, the ones an XNNPACK runtime answered (xnnpack_runtime_calls(): the engine that really ran
  // them, where a route races XNNPACK against the engine chosen at load)
  std::int64_t xnnpack_calls = 0;
  std::int64_t onednn_calls = 0;  // and the ones a oneDNN runtime answered (onednn_runtime_calls())
  // This process's CPU time per call over the reported windows, all threads (the energy sampler's too): about
  // p50 when one thread worked, up to cores x p50 when every core spun or worked throughout.
  double cpu_ms_per_call = 0.0;
  std::int64_t parameter_bytes = 0;
  std::optional<double> test_acc;
  // Per reported window: throughput, p50/p99 and J/1000 (their spread is the row's noise for `ipj gate`).
  struct WindowStats {
    double throughput_per_s = 0.0, p50_ms = 0.0, p99_ms = 0.0, j_per_1000 = 0.0;
  };
  std::vector<WindowStats> window_stats;
  // The energy window behind j_per_1000: seconds, meter readings, and the estimate model (empty if measured).
  double energy_window_s = 0.0;
  int energy_samples = 0;
  std::string energy_model;
};
Json to_json(const BenchRow& row);

// `monitor` may be null (no energy figures). Throws ipj::Error(usage) when the model has no sample shape.
BenchRow run_latency_bench(const InferenceModel& model, std::int64_t batch, const BenchOptions& options,
                           energy::EnergyMonitor* monitor);

// The stability rule of `ipj bench` and `ipj load`: the last `count` window throughputs agree within
// `tolerance`, i.e. (max - min) / mean <= tolerance with a positive mean. False with fewer than `count`.
bool windows_agree(const std::vector<double>& throughputs, int count, double tolerance);

// The q-quantile (0..1) of `values` by linear interpolation between order statistics; 0 for an empty list.
double quantile(std::vector<double> values, double q);

}  // namespace ipj::infer
