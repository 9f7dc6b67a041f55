// Sections of `ipj bench` (latency, throughput and J/1000 per variant x batch) and `ipj load` (closed-loop
// load per concurrency level).
#include <algorithm>
#include <map>
#include <set>

#include "kinds.hpp"
#include "text_format.hpp"

namespace ipj::report {
namespace {

// Range of one field over a row's measurement windows (`window_stats`, when the file has them).
std::optional<Spread> window_spread(const Fields& fields, const Json* windows, const char* key,
                                    const std::string& where) {
  if (!windows || windows->size() < 2) return std::nullopt;
  Spread spread{1e300, -1e300, 0};
  for (std::size_t index = 0; index < windows->size(); ++index) {
    const auto value = fields.optional_number((*windows)[index], key, indexed(where, "window_stats", index));
    if (!value) return std::nullopt;
    spread.low = std::min(spread.low, *value);
    spread.high = std::max(spread.high, *value);
    ++spread.count;
  }
  return spread;
}

Axis batch_axis(const std::string& label) {
  Axis axis;
  axis.label = label;
  axis.scale = AxisScale::log2;
  return axis;
}

}  // namespace

namespace {

// One row of `ipj bench --json` as read (required keys checked).
struct BenchRowValues {
  std::string variant, key, label;
  energy::ReportedSource source;
  double batch = 0, p50_ms = 0, p99_ms = 0, rate_per_s = 0;
  std::optional<double> p90_ms, j_per_1000, windows_count, accuracy;
  bool stable = true;
  const Json* windows = nullptr;  // window_stats
};

BenchRowValues read_bench_row(const Fields& fields, const Json& row, const std::string& at) {
  BenchRowValues values;
  values.variant = fields.text(row, "variant", at);
  values.batch = fields.number(row, "batch", at);
  values.p50_ms = fields.number(row, "p50_ms", at);
  values.p99_ms = fields.number(row, "p99_ms", at);
  values.rate_per_s = fields.number(row, "throughput_per_s", at);
  values.p90_ms = fields.optional_number(row, "p90_ms", at);
  values.j_per_1000 = fields.optional_number(row, "j_per_1000", at);
  values.source = read_energy_source(fields, row, "energy_source", at);
  if (!values.source) values.j_per_1000.reset();
  values.stable = fields.optional_flag(row, "stable", at).value_or(true);
  values.windows_count = fields.optional_number(row, "windows", at);
  values.accuracy = fields.optional_number(row, "test_acc", at);
  values.windows = fields.optional_array(row, "window_stats", at);
  values.key = values.variant + ".b" + significant(values.batch, 8);
  values.label = values.variant + ", batch " + significant(values.batch, 8);
  return values;
}

// Throughput, p50, p99 and J/1000 of one row, with the spread of its windows; its energy figure and
// accuracy-vs-energy point.
void add_row_metrics(const Fields& fields, const Json& row, const BenchRowValues& values,
                     const std::string& at, Section& section) {
  auto add = [&](const char* field, const std::string& what, const std::string& unit, double value,
                 Direction direction, MetricCategory category) -> Metric& {
    Metric metric =
        make_metric(values.key + "." + field, values.label + ": " + what, unit, value, direction, category);
    metric.spread = window_spread(fields, values.windows, field, at);
    section.metrics.push_back(metric);
    return section.metrics.back();
  };
  add("throughput_per_s", "throughput", "inferences/s", values.rate_per_s, Direction::higher_is_better,
      MetricCategory::throughput);
  add("p50_ms", "p50 latency", "ms", values.p50_ms, Direction::lower_is_better, MetricCategory::latency);
  add("p99_ms", "p99 latency", "ms", values.p99_ms, Direction::lower_is_better, MetricCategory::latency);
  if (!values.j_per_1000) return;
  EnergyProvenance provenance;
  provenance.source = energy::reported_source_name(values.source);
  provenance.model = fields.optional_text(row, "energy_model", "", at);
  provenance.samples = fields.optional_number(row, "energy_samples", at);
  provenance.sample_hz = fields.optional_number(row, "energy_sample_hz", at);
  provenance.window_s = fields.optional_number(row, "energy_window_s", at);
  add("j_per_1000", "energy per 1000 inferences", "J/1000 inferences", *values.j_per_1000,
      Direction::lower_is_better, MetricCategory::energy)
      .energy = provenance;
  section.energy.push_back({values.label, *values.j_per_1000, "J/1000 inferences", provenance});
  if (values.accuracy)
    section.pareto.push_back({values.variant + " batch " + significant(values.batch, 8), *values.accuracy,
                              *values.j_per_1000, energy::reported_source_name(values.source),
                              EnergyDomain::inference});
}

// Latency, throughput and J/1000 against batch size, one colour per variant.
class BenchCharts {
 public:
  void add(const BenchRowValues& values) {
    if (!colors_.count(values.variant)) {
      const int color = static_cast<int>(colors_.size());
      colors_[values.variant] = color;
      order_.push_back(values.variant);
      p50_[values.variant] = {values.variant + " p50", {}, {}, false, color};
      p99_[values.variant] = {values.variant + " p99", {}, {}, true, color};
      rate_[values.variant] = {values.variant, {}, {}, false, color};
      joules_[values.variant] = {values.variant, {}, {}, false, color};
    }
    p50_[values.variant].points.emplace_back(values.batch, values.p50_ms);
    p99_[values.variant].points.emplace_back(values.batch, values.p99_ms);
    rate_[values.variant].points.emplace_back(values.batch, values.rate_per_s);
    if (values.j_per_1000) {
      joules_[values.variant].points.emplace_back(values.batch, *values.j_per_1000);
      sources_.insert(energy::reported_source_name(values.source));
    }
  }

  const std::vector<std::string>& variants() const { return order_; }

  std::vector<Chart> charts() const {
    Chart latency = chart("Latency per call vs batch size", "latency", "ms");
    latency.caption = "solid: p50; dashed: p99 (per forward call of the whole batch)";
    Chart throughput = chart("Throughput vs batch size", "throughput", "inferences/s");
    Chart energy = chart("Energy per 1000 inferences vs batch size", "energy", "J/1000 inferences");
    for (const std::string& variant : order_) {
      latency.series.push_back(p50_.at(variant));
      latency.series.push_back(p99_.at(variant));
      throughput.series.push_back(rate_.at(variant));
      if (!joules_.at(variant).points.empty()) energy.series.push_back(joules_.at(variant));
    }
    std::vector<Chart> charts{latency, throughput};
    if (!energy.series.empty()) {
      std::string source_text;
      for (const std::string& source : sources_)
        source_text += (source_text.empty() ? "" : ", ") + source;
      energy.caption = "energy source: " + source_text + " (over the same windows as the latencies)";
      charts.push_back(energy);
    }
    return charts;
  }

 private:
  static Chart chart(const std::string& title, const std::string& label, const std::string& unit) {
    Chart result;
    result.title = title;
    result.x = batch_axis("batch size");
    result.y.label = label;
    result.y.unit = unit;
    result.y.include_zero = true;
    return result;
  }

  std::map<std::string, int> colors_;
  std::vector<std::string> order_;
  std::map<std::string, Series> p50_, p99_, rate_, joules_;
  std::set<std::string> sources_;
};

}  // namespace

Section build_bench_section(const ResultsFile& file) {
  const Fields fields(file.path, file.kind);
  const Json& json = file.json;
  Section section;
  const std::string model = fields.optional_text(json, "model", "?");
  section.title = "Inference benchmark: " + model;
  section.facts.emplace_back("model", model);
  if (const auto window = fields.optional_number(json, "window_s"))
    section.facts.emplace_back("window",
                               significant(*window, 3) + " s (three agreeing windows kept per row)");
  std::map<std::string, double> accuracy_by_variant;
  if (const Json* variants = fields.optional_array(json, "variants")) {
    std::string listed;
    for (std::size_t index = 0; index < variants->size(); ++index) {
      const std::string at = indexed("", "variants", index);
      const std::string variant = fields.text((*variants)[index], "variant", at);
      listed += (listed.empty() ? "" : ", ") + variant + " (" +
                fields.optional_text((*variants)[index], "format", "?", at) + ")";
      if (const auto accuracy = fields.optional_number((*variants)[index], "test_acc", at))
        accuracy_by_variant[variant] = *accuracy;
    }
    section.facts.emplace_back("variants", listed);
  }
  const Json& rows = fields.array(json, "rows");
  if (rows.empty()) fields.fail_at("", "rows", "is empty");
  BenchCharts charts;
  Table table;
  table.title = "Rows";
  table.header = {"variant", "batch",  "p50 ms",   "p90 ms",  "p99 ms", "inferences/s",
                  "J/1000",  "source", "test acc", "windows", "stable"};
  std::string best_key;  // the fastest row: its throughput and J/1000 head the summary
  double best_rate = -1.0;
  for (std::size_t index = 0; index < rows.size(); ++index) {
    const std::string at = indexed("", "rows", index);
    const BenchRowValues values = read_bench_row(fields, rows[index], at);
    add_row_metrics(fields, rows[index], values, at, section);
    charts.add(values);
    if (values.rate_per_s > best_rate) {
      best_rate = values.rate_per_s;
      best_key = values.key;
    }
    if (!values.stable)
      section.notes.push_back(
          values.label + ": windows never agreed within 10%" +
          (values.windows_count ? " (" + significant(*values.windows_count, 3) + " windows)" : "") +
          "; the machine was busy or the window too short");
    table.rows.push_back(
        {values.variant, significant(values.batch, 8), fixed(values.p50_ms, 3),
         values.p90_ms ? fixed(*values.p90_ms, 3) : "-", fixed(values.p99_ms, 3),
         significant(values.rate_per_s, 4), values.j_per_1000 ? significant(*values.j_per_1000, 4) : "-",
         energy::reported_source_name(values.source), values.accuracy ? fixed(*values.accuracy, 4) : "-",
         values.windows_count ? significant(*values.windows_count, 3) : "-", values.stable ? "yes" : "no"});
  }
  for (Metric& metric : section.metrics)
    metric.headline = metric.key == best_key + ".throughput_per_s" || metric.key == best_key + ".j_per_1000";
  bool first_accuracy = true;
  for (const std::string& variant : charts.variants()) {
    const auto found = accuracy_by_variant.find(variant);
    if (found == accuracy_by_variant.end()) continue;
    section.metrics.push_back(make_metric(variant + ".test_acc", variant + ": test accuracy", "",
                                          found->second, Direction::higher_is_better,
                                          MetricCategory::accuracy, first_accuracy));
    first_accuracy = false;
  }
  section.charts = charts.charts();
  section.tables.push_back(table);
  return section;
}

Section build_load_section(const ResultsFile& file) {
  const Fields fields(file.path, file.kind);
  const Json& json = file.json;
  Section section;
  const std::string model = fields.optional_text(json, "model", "?");
  const std::string url = fields.optional_text(json, "url", "?");
  section.title = "Load test: " + model + " at " + url;
  section.facts.emplace_back("model", model);
  section.facts.emplace_back("server", url);
  if (const auto batch = fields.optional_number(json, "batch"))
    section.facts.emplace_back("rows per request", significant(*batch, 6));
  if (const auto binary = fields.optional_flag(json, "binary"))
    section.facts.emplace_back("tensor encoding", *binary ? "binary extension" : "JSON");
  const Json& levels = fields.array(json, "levels");
  if (levels.empty()) fields.fail_at("", "levels", "is empty");

  Chart latency, throughput;
  latency.title = "Request latency vs concurrency";
  latency.x = batch_axis("concurrent clients");
  latency.y.label = "latency";
  latency.y.unit = "ms";
  latency.y.include_zero = true;
  latency.caption = "closed loop: one request in flight per client";
  throughput.title = "Throughput vs concurrency";
  throughput.x = batch_axis("concurrent clients");
  throughput.y.label = "throughput";
  throughput.y.unit = "inferences/s";
  throughput.y.include_zero = true;
  Series p50{"p50", {}, {}, false, 0}, p90{"p90", {}, {}, true, 1}, p99{"p99", {}, {}, false, 2};
  Series rate{"inferences/s", {}, {}, false, 0};
  Table table;
  table.title = "Levels";
  table.header = {"concurrency", "req/s", "inferences/s", "p50 ms", "p90 ms", "p99 ms", "errors", "stable"};
  double best_rate = -1.0;
  std::size_t best_index = 0;
  for (std::size_t index = 0; index < levels.size(); ++index) {
    const std::string at = indexed("", "levels", index);
    const Json& level = levels[index];
    const double concurrency = fields.number(level, "concurrency", at);
    const double inferences = fields.number(level, "inferences_per_s", at);
    const double p50_ms = fields.number(level, "p50_ms", at);
    const double p99_ms = fields.number(level, "p99_ms", at);
    const auto p90_ms = fields.optional_number(level, "p90_ms", at);
    const double requests = fields.optional_number(level, "requests", at).value_or(0.0);
    const double errors = fields.optional_number(level, "errors", at).value_or(0.0);
    const bool stable = fields.optional_flag(level, "stable", at).value_or(true);
    p50.points.emplace_back(concurrency, p50_ms);
    if (p90_ms) p90.points.emplace_back(concurrency, *p90_ms);
    p99.points.emplace_back(concurrency, p99_ms);
    rate.points.emplace_back(concurrency, inferences);
    const std::string key = "c" + significant(concurrency, 8);
    const std::string label = significant(concurrency, 8) + " clients";
    section.metrics.push_back(make_metric(key + ".inferences_per_s", label + ": throughput", "inferences/s",
                                          inferences, Direction::higher_is_better,
                                          MetricCategory::throughput));
    section.metrics.push_back(make_metric(key + ".p50_ms", label + ": p50 latency", "ms", p50_ms,
                                          Direction::lower_is_better, MetricCategory::latency));
    section.metrics.push_back(make_metric(key + ".p99_ms", label + ": p99 latency", "ms", p99_ms,
                                          Direction::lower_is_better, MetricCategory::latency));
    if (requests + errors > 0)
      section.metrics.push_back(make_metric(key + ".error_rate", label + ": error rate", "",
                                            errors / (requests + errors), Direction::lower_is_better,
                                            MetricCategory::errors));
    if (inferences > best_rate) {
      best_rate = inferences;
      best_index = section.metrics.size() - (requests + errors > 0 ? 4 : 3);
    }
    if (errors > 0) section.notes.push_back(label + ": " + significant(errors, 6) + " failed request(s)");
    if (!stable) section.notes.push_back(label + ": windows never agreed within 10%");
    table.rows.push_back({significant(concurrency, 8),
                          significant(fields.optional_number(level, "requests_per_s", at).value_or(0), 4),
                          significant(inferences, 4), fixed(p50_ms, 3), p90_ms ? fixed(*p90_ms, 3) : "-",
                          fixed(p99_ms, 3), significant(errors, 6), stable ? "yes" : "no"});
  }
  section.metrics[best_index].headline = true;
  latency.series = {p50};
  if (!p90.points.empty()) latency.series.push_back(p90);
  latency.series.push_back(p99);
  throughput.series = {rate};
  section.charts = {latency, throughput};
  section.tables.push_back(table);
  return section;
}

}  // namespace ipj::report
