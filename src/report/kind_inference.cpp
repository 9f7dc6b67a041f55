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

  Chart latency, throughput, energy;
  latency.title = "Latency per call vs batch size";
  latency.caption = "solid: p50; dashed: p99 (per forward call of the whole batch)";
  latency.x = batch_axis("batch size");
  latency.y.label = "latency";
  latency.y.unit = "ms";
  latency.y.include_zero = true;
  throughput.title = "Throughput vs batch size";
  throughput.x = batch_axis("batch size");
  throughput.y.label = "throughput";
  throughput.y.unit = "inferences/s";
  throughput.y.include_zero = true;
  energy.title = "Energy per 1000 inferences vs batch size";
  energy.x = batch_axis("batch size");
  energy.y.label = "energy";
  energy.y.unit = "J/1000 inferences";
  energy.y.include_zero = true;
  std::map<std::string, int> colors;
  std::map<std::string, Series> p50, p99, rate, joules;
  std::vector<std::string> order;
  std::set<std::string> sources;
  Table table;
  table.title = "Rows";
  table.header = {"variant", "batch",  "p50 ms",   "p90 ms",  "p99 ms", "inferences/s",
                  "J/1000",  "source", "test acc", "windows", "stable"};
  std::string best_key;  // the fastest row: its throughput and J/1000 head the summary
  double best_rate = -1.0;
  std::vector<Metric> metrics;
  for (std::size_t index = 0; index < rows.size(); ++index) {
    const std::string at = indexed("", "rows", index);
    const Json& row = rows[index];
    const std::string variant = fields.text(row, "variant", at);
    const double batch = fields.number(row, "batch", at);
    const double p50_ms = fields.number(row, "p50_ms", at);
    const double p99_ms = fields.number(row, "p99_ms", at);
    const double rate_per_s = fields.number(row, "throughput_per_s", at);
    const auto p90_ms = fields.optional_number(row, "p90_ms", at);
    const auto j_per_1000 = fields.optional_number(row, "j_per_1000", at);
    const std::string source = fields.optional_text(row, "energy_source", "none", at);
    const bool stable = fields.optional_flag(row, "stable", at).value_or(true);
    const auto windows_count = fields.optional_number(row, "windows", at);
    const Json* windows = fields.optional_array(row, "window_stats", at);
    if (!colors.count(variant)) {
      colors[variant] = static_cast<int>(colors.size());
      order.push_back(variant);
      p50[variant] = {variant + " p50", {}, {}, false, colors[variant]};
      p99[variant] = {variant + " p99", {}, {}, true, colors[variant]};
      rate[variant] = {variant, {}, {}, false, colors[variant]};
      joules[variant] = {variant, {}, {}, false, colors[variant]};
    }
    p50[variant].points.emplace_back(batch, p50_ms);
    p99[variant].points.emplace_back(batch, p99_ms);
    rate[variant].points.emplace_back(batch, rate_per_s);
    const std::string key = variant + ".b" + significant(batch, 8);
    const std::string label = variant + ", batch " + significant(batch, 8);
    Metric throughput_metric =
        make_metric(key + ".throughput_per_s", label + ": throughput", "inferences/s", rate_per_s,
                    Direction::higher_is_better, MetricCategory::throughput);
    throughput_metric.spread = window_spread(fields, windows, "throughput_per_s", at);
    Metric p50_metric = make_metric(key + ".p50_ms", label + ": p50 latency", "ms", p50_ms,
                                    Direction::lower_is_better, MetricCategory::latency);
    p50_metric.spread = window_spread(fields, windows, "p50_ms", at);
    Metric p99_metric = make_metric(key + ".p99_ms", label + ": p99 latency", "ms", p99_ms,
                                    Direction::lower_is_better, MetricCategory::latency);
    p99_metric.spread = window_spread(fields, windows, "p99_ms", at);
    metrics.push_back(throughput_metric);
    metrics.push_back(p50_metric);
    metrics.push_back(p99_metric);
    if (j_per_1000 && source != "none") {
      sources.insert(source);
      joules[variant].points.emplace_back(batch, *j_per_1000);
      Metric metric =
          make_metric(key + ".j_per_1000", label + ": energy per 1000 inferences", "J/1000 inferences",
                      *j_per_1000, Direction::lower_is_better, MetricCategory::energy);
      metric.spread = window_spread(fields, windows, "j_per_1000", at);
      EnergyProvenance provenance;
      provenance.source = source;
      provenance.model = fields.optional_text(row, "energy_model", "", at);
      provenance.samples = fields.optional_number(row, "energy_samples", at);
      provenance.sample_hz = fields.optional_number(row, "energy_sample_hz", at);
      provenance.window_s = fields.optional_number(row, "energy_window_s", at);
      metric.energy = provenance;
      metrics.push_back(metric);
      section.energy.push_back({label, *j_per_1000, "J/1000 inferences", provenance});
      if (const auto accuracy = fields.optional_number(row, "test_acc", at))
        section.pareto.push_back({variant + " batch " + significant(batch, 8), *accuracy, *j_per_1000, source,
                                  EnergyDomain::inference});
    }
    if (rate_per_s > best_rate) {
      best_rate = rate_per_s;
      best_key = key;
    }
    if (!stable)
      section.notes.push_back(label + ": windows never agreed within 10%" +
                              (windows_count ? " (" + significant(*windows_count, 3) + " windows)" : "") +
                              "; the machine was busy or the window too short");
    const auto accuracy = fields.optional_number(row, "test_acc", at);
    table.rows.push_back({variant, significant(batch, 8), fixed(p50_ms, 3), p90_ms ? fixed(*p90_ms, 3) : "-",
                          fixed(p99_ms, 3), significant(rate_per_s, 4),
                          j_per_1000 ? significant(*j_per_1000, 4) : "-", source,
                          accuracy ? fixed(*accuracy, 4) : "-",
                          windows_count ? significant(*windows_count, 3) : "-", stable ? "yes" : "no"});
  }
  for (Metric& metric : metrics)
    metric.headline = metric.key == best_key + ".throughput_per_s" || metric.key == best_key + ".j_per_1000";
  bool first_accuracy = true;
  for (const std::string& variant : order) {
    const auto found = accuracy_by_variant.find(variant);
    if (found == accuracy_by_variant.end()) continue;
    metrics.push_back(make_metric(variant + ".test_acc", variant + ": test accuracy", "", found->second,
                                  Direction::higher_is_better, MetricCategory::accuracy, first_accuracy));
    first_accuracy = false;
  }
  section.metrics = std::move(metrics);
  for (const std::string& variant : order) {
    latency.series.push_back(p50[variant]);
    latency.series.push_back(p99[variant]);
    throughput.series.push_back(rate[variant]);
    if (!joules[variant].points.empty()) energy.series.push_back(joules[variant]);
  }
  section.charts = {latency, throughput};
  if (!energy.series.empty()) {
    std::string source_text;
    for (const std::string& source : sources)
      source_text += (source_text.empty() ? "" : ", ") + source;
    energy.caption = "energy source: " + source_text + " (over the same windows as the latencies)";
    section.charts.push_back(energy);
  }
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
