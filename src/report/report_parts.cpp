// Summary rows, deltas, accuracy-vs-energy charts and machine facts for the report renderers.
#include "report_parts.hpp"

#include <ctime>
#include <map>

#include "text_format.hpp"

namespace ipj::report {

std::vector<SummaryRow> summary_rows(const std::vector<Section>& sections) {
  std::vector<SummaryRow> rows;
  for (std::size_t index = 0; index < sections.size(); ++index) {
    SummaryRow row;
    row.index = index + 1;
    row.section = &sections[index];
    for (const Metric& metric : sections[index].metrics) {
      if (!metric.headline) continue;
      if (metric.category == MetricCategory::accuracy && !row.accuracy) row.accuracy = metric;
      if (metric.category == MetricCategory::throughput && !row.throughput) row.throughput = metric;
      if (metric.category == MetricCategory::energy && !row.energy) row.energy = metric;
    }
    rows.push_back(row);
  }
  return rows;
}

std::vector<DeltaGroup> delta_groups(const std::vector<Section>& sections) {
  std::vector<DeltaGroup> groups;
  std::map<std::string, std::size_t> first_of_kind;
  for (std::size_t index = 0; index < sections.size(); ++index) {
    const auto found = first_of_kind.find(sections[index].kind);
    if (found == first_of_kind.end()) {
      first_of_kind[sections[index].kind] = index;
      continue;
    }
    DeltaGroup group;
    group.baseline_index = found->second + 1;
    group.current_index = index + 1;
    group.result = compare_sections(sections[found->second], sections[index], GateOptions{});
    groups.push_back(std::move(group));
  }
  return groups;
}

std::vector<Chart> pareto_charts(const std::vector<Section>& sections) {
  std::vector<Chart> charts;
  for (const EnergyDomain domain : {EnergyDomain::training, EnergyDomain::inference}) {
    Chart chart;
    chart.kind = ChartKind::scatter;
    chart.pareto_frontier = true;
    chart.y.label = "test accuracy";
    chart.y.unit = "%";
    chart.y.percent = true;
    if (domain == EnergyDomain::training) {
      chart.title = "Training: accuracy vs energy";
      chart.x.label = "energy of the run";
      chart.x.unit = "J";
    } else {
      chart.title = "Inference: accuracy vs energy per 1000 inferences";
      chart.x.label = "energy per 1000 inferences";
      chart.x.unit = "J";
    }
    chart.x.include_zero = true;
    std::map<std::string, std::size_t> series_of_source;
    for (std::size_t index = 0; index < sections.size(); ++index)
      for (const ParetoPoint& point : sections[index].pareto) {
        if (point.domain != domain) continue;
        auto found = series_of_source.find(point.source);
        if (found == series_of_source.end()) {
          found = series_of_source.emplace(point.source, chart.series.size()).first;
          chart.series.push_back(
              {point.source + " energy", {}, {}, false, static_cast<int>(chart.series.size())});
        }
        Series& series = chart.series[found->second];
        series.points.emplace_back(point.joules, point.accuracy);
        series.point_labels.push_back("#" + std::to_string(index + 1) + " " + point.label);
      }
    if (chart.series.empty()) continue;
    chart.caption =
        "Each point is one result; the dashed step line is the Pareto frontier (no other result is "
        "both more accurate and cheaper). One frontier per energy source: estimates are never "
        "compared with measured energy.";
    charts.push_back(chart);
  }
  return charts;
}

namespace {

void flatten(const std::string& prefix, const Json& value, int depth,
             std::vector<std::pair<std::string, std::string>>& facts) {
  if (value.is_object()) {
    bool all_flags = !value.empty();
    for (const auto& item : value.items())
      all_flags = all_flags && item.value().is_boolean();
    if (all_flags && !prefix.empty()) {  // e.g. cpu.features: the true ones
      std::string present;
      for (const auto& item : value.items())
        if (item.value().get<bool>()) present += (present.empty() ? "" : ", ") + item.key();
      facts.emplace_back(prefix, present.empty() ? "none" : present);
      return;
    }
    if (depth >= 2) {
      facts.emplace_back(prefix, value.dump());
      return;
    }
    for (const auto& item : value.items())
      flatten(prefix.empty() ? item.key() : prefix + "." + item.key(), item.value(), depth + 1, facts);
  } else if (value.is_array()) {
    std::string joined;
    for (const Json& element : value) {
      std::string text = element.is_string() ? element.get<std::string>()
                         : element.is_object() && element.contains("name") && element["name"].is_string()
                             ? element["name"].get<std::string>()
                             : element.dump();
      joined += (joined.empty() ? "" : ", ") + text;
    }
    facts.emplace_back(prefix, joined.empty() ? "none" : joined);
  } else if (value.is_string()) {
    facts.emplace_back(prefix, value.get<std::string>());
  } else if (value.is_number() && prefix.size() > 6 && prefix.compare(prefix.size() - 6, 6, "_bytes") == 0) {
    facts.emplace_back(prefix, fixed(value.get<double>() / (1024.0 * 1024.0 * 1024.0), 1) + " GiB");
  } else if (!value.is_null()) {
    facts.emplace_back(prefix, value.dump());
  }
}

}  // namespace

std::vector<std::pair<std::string, std::string>> environment_facts(const Json& environment) {
  std::vector<std::pair<std::string, std::string>> facts;
  if (environment.is_object()) flatten("", environment, 0, facts);
  return facts;
}

std::string metric_text(const Metric& metric) {
  if (metric.category == MetricCategory::accuracy && metric.unit.empty()) return fixed(metric.value, 4);
  std::string text = with_unit(metric.value, metric.unit);
  if (metric.spread)
    text += " [" + significant(metric.spread->low, 4) + " to " + significant(metric.spread->high, 4) + "]";
  return text;
}

std::string window_text(const EnergyProvenance& provenance) {
  std::string text = provenance.window_s ? significant(*provenance.window_s, 3) + " s" : "";
  if (provenance.samples && provenance.sample_hz)
    text += (text.empty() ? "" : ", ") + significant(*provenance.samples, 5) + " samples at " +
            significant(*provenance.sample_hz, 3) + " Hz" +
            (provenance.window_derived ? " (from the interval)" : "");
  return text.empty() ? "-" : text;
}

std::string utc_now() {
  char stamp[64];
  const std::time_t now = std::time(nullptr);
  std::tm parts{};
  gmtime_r(&now, &parts);
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M UTC", &parts);
  return stamp;
}

}  // namespace ipj::report
