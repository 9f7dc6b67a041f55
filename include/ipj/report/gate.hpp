// `ipj gate`: compares the metrics of two results files of the same kind (throughput, latency, energy,
// accuracy; direction-aware), with per-metric thresholds, noise from repeats/windows, and MLPerf-style energy
// rules (same source, same estimate model, a window of >= 60 samples at >= 1 Hz). LibTorch-free.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ipj/core/json_io.hpp"
#include "ipj/report/report_model.hpp"

namespace ipj::report {

// A regression threshold: a relative change ("5%") or, for accuracy, absolute points ("0.5pt"); "off"
// excludes a metric from gating.
struct Threshold {
  double value = 0.05;  // fraction for relative thresholds, points for absolute ones
  bool points = false;
  bool off = false;
};
// Parses "5%", "0.5pt" or "off"; throws Error(usage) naming `flag`.
Threshold parse_threshold(const std::string& text, const std::string& flag);
std::string describe(const Threshold& threshold);

// `--metric NAME:THRESHOLD`: NAME is a metric key ("fp32.b64.p99_ms"), its last part ("p99_ms") or a
// category (accuracy, throughput, latency, energy, time, size, errors). The most specific match wins.
struct MetricThreshold {
  std::string name;
  Threshold threshold;
};
MetricThreshold parse_metric_threshold(const std::string& text);

struct GateOptions {
  Threshold max_regression;  // default for every metric: 5%
  std::vector<MetricThreshold> metrics;
  double min_energy_samples = 60.0;  // MLPerf power: a window of at least 60 samples ...
  double min_sample_hz = 1.0;        // ... at 1 Hz or faster
};

enum class GateStatus {
  ok,              // within the threshold
  improved,        // better by more than the threshold
  regressed,       // worse by more than the threshold and beyond the noise: fails the gate
  within_noise,    // worse by more than the threshold, but inside the spread of repeats/windows
  not_comparable,  // energy with different sources or estimate models, or too short a window
  missing,         // in the baseline only: fails the gate (the benchmark stopped measuring it)
  added,           // in the current file only
  ignored,         // threshold "off"
};
const char* status_name(GateStatus status);

struct GateRow {
  std::string key, label, unit;
  Direction direction = Direction::higher_is_better;
  MetricCategory category = MetricCategory::throughput;
  std::optional<double> baseline, current;
  std::optional<double> change;  // relative (current - baseline) / |baseline|
  std::optional<double> noise;   // relative half-ranges of both sides' spreads, summed
  Threshold threshold;
  std::string threshold_from;  // "--max-regression" or "--metric NAME"
  GateStatus status = GateStatus::ok;
  std::string note;
};

struct GateResult {
  std::string baseline_path, current_path, kind;
  std::vector<GateRow> rows;
  bool regressed = false;  // any row regressed or missing
};

// Compares two sections of the same kind (throws Error(usage) for different kinds or a --metric that names
// nothing in either file).
GateResult compare_sections(const Section& baseline, const Section& current, const GateOptions& options);

// The human table: metric, baseline, current, change, threshold, status, note.
std::string render_gate_table(const GateResult& result);
Json to_json(const GateResult& result, const GateOptions& options);

}  // namespace ipj::report
