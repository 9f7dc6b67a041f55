// What `ipj report` and `ipj gate` take from one results file, as plain data: metrics (with direction, spread
// and energy provenance), charts, tables, energy figures and accuracy-vs-joules points. Kinds build it; the
// HTML, Markdown and gate renderers read it. LibTorch-free; no rendering here.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ipj/core/json_io.hpp"

namespace ipj::report {

enum class Direction { higher_is_better, lower_is_better };

// Groups that `--metric NAME:THRESHOLD` can name instead of one metric.
enum class MetricCategory { accuracy, throughput, latency, energy, time, size, errors };
const char* category_name(MetricCategory category);
std::optional<MetricCategory> parse_category(const std::string& name);

// Range of repeated observations of one metric (seeds of `train --repeat`, windows of `bench`).
struct Spread {
  double low = 0.0;
  double high = 0.0;
  int count = 0;
};

// Where an energy figure comes from, and over what window it was measured (MLPerf power rules).
struct EnergyProvenance {
  std::string source;              // counter | integrated | estimated | none
  std::string model;               // for estimates: the estimate's model and inputs
  std::optional<double> window_s;  // wall time of the measurement window
  std::optional<double> samples;   // meter readings inside the window
  std::optional<double> sample_hz;
  bool window_derived = false;  // samples computed from the sampling interval (not recorded in the file)
};

struct Metric {
  std::string key;    // stable name the gate matches on, e.g. "fp32.b64.throughput_per_s"
  std::string label;  // human name, e.g. "fp32, batch 64: throughput"
  std::string unit;   // "inferences/s", "ms", "J", "" for fractions
  double value = 0.0;
  Direction direction = Direction::higher_is_better;
  MetricCategory category = MetricCategory::throughput;
  std::optional<Spread> spread;
  std::optional<EnergyProvenance> energy;  // set for energy metrics
  bool headline = false;                   // shown in the report's summary table
};

// One energy number as shown: where, value, unit, provenance.
struct EnergyFigure {
  std::string where;  // "final", "epoch curve", "fp32 batch 64", "device cpu (estimate)"
  double value = 0.0;
  std::string unit;  // "J", "J/sample", "J/1000 inferences"
  EnergyProvenance provenance;
};

enum class AxisScale { linear, log2 };

struct Axis {
  std::string label;
  std::string unit;
  AxisScale scale = AxisScale::linear;
  bool include_zero = false;
  bool percent = false;                 // values are fractions shown as percentages
  std::vector<std::string> categories;  // bar charts: one label per x position 0, 1, ...
};

enum class ChartKind { line, scatter, bar };

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // (x, y); bar charts: x = category index
  std::vector<std::string> point_labels;          // optional tooltip per point
  bool dashed = false;
  int color = -1;  // palette index; -1 = the series' position
};

struct Chart {
  std::string title;
  std::string caption;  // one line under the chart (what is plotted, energy source)
  ChartKind kind = ChartKind::line;
  Axis x, y;
  std::vector<Series> series;
  bool pareto_frontier = false;  // scatter: draw each series' frontier (max y at min x)
};

struct Table {
  std::string title;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};

enum class EnergyDomain { training, inference };

// One point of the accuracy-vs-joules scatter.
struct ParetoPoint {
  std::string label;
  double accuracy = 0.0;
  double joules = 0.0;  // training: J of the run; inference: J per 1000 inferences
  std::string source;
  EnergyDomain domain = EnergyDomain::training;
};

// Everything the report shows for one results file.
struct Section {
  std::string kind;
  std::string path;
  std::string title;
  std::vector<std::pair<std::string, std::string>> facts;  // (name, value), e.g. ("model", "mlp")
  std::vector<std::string> notes;                          // caveats: incomplete run, unstable rows
  std::vector<Metric> metrics;
  std::vector<EnergyFigure> energy;
  std::vector<ParetoPoint> pareto;
  std::vector<Chart> charts;
  std::vector<Table> tables;
  Json environment;  // `ipj devices --json` object, or null
};

}  // namespace ipj::report
