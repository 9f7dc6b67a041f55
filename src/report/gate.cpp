// Metric matching, thresholds, noise and energy comparability of `ipj gate`.
#include "ipj/report/gate.hpp"

#include <cctype>
#include <cmath>
#include <map>

#include "ipj/core/error.hpp"
#include "ipj/core/text_table.hpp"
#include "text_format.hpp"

namespace ipj::report {
namespace {

double parse_number(const std::string& text, const std::string& flag, const std::string& whole) {
  std::size_t used = 0;
  double value = 0.0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty() || !std::isfinite(value) || value < 0)
    fail(ErrorCategory::usage, flag + " '" + whole +
                                   "': expected a non-negative percentage such as 5% or points "
                                   "such as 0.5pt (accuracy), or off");
  return value;
}

// Accuracy fractions and "pt" metrics accept thresholds in points.
bool counts_in_points(const Metric& metric) {
  return metric.unit == "pt" || (metric.category == MetricCategory::accuracy && metric.unit.empty());
}

double points_of(const Metric& metric, double difference) {
  return metric.unit == "pt" ? difference : difference * 100.0;
}

std::string last_part(const std::string& key) {
  const std::size_t dot = key.rfind('.');
  return dot == std::string::npos ? key : key.substr(dot + 1);
}

// The threshold of one metric: exact key, then its last part, then its category, then --max-regression.
std::pair<Threshold, std::string> threshold_for(const Metric& metric, const GateOptions& options) {
  int best_rank = 0;
  std::pair<Threshold, std::string> chosen{options.max_regression, "--max-regression"};
  for (const MetricThreshold& entry : options.metrics) {
    int rank = 0;
    if (entry.name == metric.key) {
      rank = 3;
    } else if (entry.name == last_part(metric.key)) {
      rank = 2;
    } else if (entry.name == category_name(metric.category)) {
      rank = 1;
    }
    if (rank > best_rank) {
      best_rank = rank;
      chosen = {entry.threshold, "--metric " + entry.name};
    }
  }
  if (chosen.first.points && !chosen.first.off && !counts_in_points(metric))
    fail(ErrorCategory::usage, chosen.second + ": points (pt) apply to accuracy metrics only; '" +
                                   metric.key + "' needs a percentage such as 10%");
  return chosen;
}

std::optional<double> relative_noise(const Metric& baseline, const Metric& current) {
  if (!baseline.spread && !current.spread) return std::nullopt;
  const double scale = std::fabs(baseline.value);
  if (scale <= 0) return std::nullopt;
  double noise = 0.0;
  for (const Metric* side : {&baseline, &current})
    if (side->spread) noise += (side->spread->high - side->spread->low) / 2.0 / scale;
  return noise;
}

// MLPerf power rules for energy figures: why two of them cannot be compared, or "" when they can.
std::string energy_incomparability(const Metric& baseline, const Metric& current,
                                   const GateOptions& options) {
  if (!baseline.energy || !current.energy) return "";
  const EnergyProvenance& base = *baseline.energy;
  const EnergyProvenance& now = *current.energy;
  if (base.source != now.source)
    return "energy sources differ (" + base.source + " vs " + now.source + "): never compared";
  if (base.source == "mixed" || base.source == "none") return "energy source is " + base.source;
  if (base.source == "estimated" && base.model != now.model)
    return base.model.empty() || now.model.empty()
               ? std::string("the estimate model is not recorded in the ") +
                     (base.model.empty() ? "baseline" : "current") +
                     " file: estimates are compared only under the same model"
               : "different estimate models (" + base.model + " vs " + now.model + ")";
  for (const auto* side : {&base, &now}) {
    const char* which = side == &base ? "baseline" : "current";
    if (!side->samples || !side->sample_hz)
      return std::string(which) + " file does not record its energy window (samples, Hz)";
    if (*side->samples < options.min_energy_samples || *side->sample_hz < options.min_sample_hz)
      return std::string(which) + " energy window has " + significant(*side->samples, 4) + " samples at " +
             significant(*side->sample_hz, 3) +
             " Hz (MLPerf power: >= " + significant(options.min_energy_samples, 3) +
             " at >= " + significant(options.min_sample_hz, 3) + " Hz)";
  }
  return "";
}

GateRow compare_metric(const Metric& baseline, const Metric& current, const GateOptions& options) {
  GateRow row;
  row.key = baseline.key;
  row.label = baseline.label;
  row.unit = baseline.unit;
  row.direction = baseline.direction;
  row.category = baseline.category;
  row.baseline = baseline.value;
  row.current = current.value;
  std::tie(row.threshold, row.threshold_from) = threshold_for(baseline, options);
  const double difference = current.value - baseline.value;
  const double worse_sign = baseline.direction == Direction::higher_is_better ? -1.0 : 1.0;
  if (baseline.value != 0.0) {
    row.change = difference / std::fabs(baseline.value);
  } else if (difference != 0.0) {
    row.change = difference > 0 ? INFINITY : -INFINITY;
  } else {
    row.change = 0.0;
  }
  row.noise = relative_noise(baseline, current);
  if (row.threshold.off) {
    row.status = GateStatus::ignored;
    return row;
  }
  if (const std::string reason = energy_incomparability(baseline, current, options); !reason.empty()) {
    row.status = GateStatus::not_comparable;
    row.note = reason;
    return row;
  }
  // How much worse, in the threshold's unit (fraction or points); negative when better.
  const double worse =
      row.threshold.points ? worse_sign * points_of(baseline, difference) : worse_sign * *row.change;
  const bool beyond = worse > row.threshold.value + 1e-12;
  const bool better = -worse > row.threshold.value + 1e-12;
  const bool inside_noise = row.noise && std::fabs(*row.change) <= *row.noise;
  if (beyond && inside_noise) {
    row.status = GateStatus::within_noise;
    row.note = "worse than the threshold but within the spread of the repeats/windows (+-" +
               fixed(*row.noise * 100.0, 1) + "%)";
  } else if (beyond) {
    row.status = GateStatus::regressed;
    if (row.noise)
      row.note = "beyond the spread of the repeats/windows (+-" + fixed(*row.noise * 100.0, 1) + "%)";
  } else if (better) {
    row.status = inside_noise ? GateStatus::within_noise : GateStatus::improved;
    if (inside_noise) row.note = "better, but within the spread (+-" + fixed(*row.noise * 100.0, 1) + "%)";
  } else {
    row.status = GateStatus::ok;
    if (!row.noise &&
        (baseline.category == MetricCategory::throughput || baseline.category == MetricCategory::latency))
      row.note = "no repeats: noise unknown";
  }
  return row;
}

std::string value_text(const std::optional<double>& value, const GateRow& row) {
  if (!value) return "-";
  if (row.category == MetricCategory::accuracy && row.unit.empty()) return fixed(*value, 4);
  return with_unit(*value, row.unit);
}

std::string upper(std::string text) {
  for (char& character : text)
    character = static_cast<char>(std::toupper(static_cast<unsigned char>(character)));
  return text;
}

}  // namespace

Threshold parse_threshold(const std::string& text, const std::string& flag) {
  Threshold threshold;
  if (text == "off") {
    threshold.off = true;
    return threshold;
  }
  if (text.size() > 1 && text.back() == '%') {
    threshold.value = parse_number(text.substr(0, text.size() - 1), flag, text) / 100.0;
  } else if (text.size() > 2 && text.compare(text.size() - 2, 2, "pt") == 0) {
    threshold.value = parse_number(text.substr(0, text.size() - 2), flag, text);
    threshold.points = true;
  } else {
    fail(ErrorCategory::usage, flag + " '" + text +
                                   "': give a unit: a percentage such as 5% (relative change) or "
                                   "points such as 0.5pt (accuracy), or off");
  }
  return threshold;
}

std::string describe(const Threshold& threshold) {
  if (threshold.off) return "off";
  return threshold.points ? significant(threshold.value, 3) + "pt"
                          : significant(threshold.value * 100.0, 3) + "%";
}

MetricThreshold parse_metric_threshold(const std::string& text) {
  const std::size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    fail(ErrorCategory::usage,
         "--metric '" + text + "': expected NAME:THRESHOLD, e.g. p99_ms:20% or test_acc:0.5pt");
  return {text.substr(0, colon),
          parse_threshold(text.substr(colon + 1), "--metric " + text.substr(0, colon))};
}

const char* status_name(GateStatus status) {
  switch (status) {
    case GateStatus::ok:
      return "ok";
    case GateStatus::improved:
      return "improved";
    case GateStatus::regressed:
      return "regressed";
    case GateStatus::within_noise:
      return "within noise";
    case GateStatus::not_comparable:
      return "not comparable";
    case GateStatus::missing:
      return "missing";
    case GateStatus::added:
      return "new";
    case GateStatus::ignored:
      return "ignored";
  }
  return "?";
}

GateResult compare_sections(const Section& baseline, const Section& current, const GateOptions& options) {
  if (baseline.kind != current.kind)
    fail(ErrorCategory::usage, "cannot gate '" + current.path + "' (" + current.kind + ") against '" +
                                   baseline.path + "' (" + baseline.kind +
                                   "): give two results of the same kind");
  for (const MetricThreshold& entry : options.metrics) {
    bool matched = static_cast<bool>(parse_category(entry.name));
    for (const Section* section : {&baseline, &current})
      for (const Metric& metric : section->metrics)
        matched = matched || metric.key == entry.name || last_part(metric.key) == entry.name;
    if (!matched) {
      std::string keys;
      for (const Metric& metric : baseline.metrics)
        keys += (keys.empty() ? "" : ", ") + metric.key;
      fail(ErrorCategory::usage, "--metric " + entry.name + ": no such metric in '" + baseline.path +
                                     "' (metrics: " + keys +
                                     "; or a category: accuracy, throughput, latency, energy, "
                                     "time, size, errors)");
    }
  }
  GateResult result;
  result.baseline_path = baseline.path;
  result.current_path = current.path;
  result.kind = baseline.kind;
  std::map<std::string, const Metric*> current_by_key;
  for (const Metric& metric : current.metrics)
    current_by_key[metric.key] = &metric;
  for (const Metric& metric : baseline.metrics) {
    const auto found = current_by_key.find(metric.key);
    if (found == current_by_key.end()) {
      GateRow row;
      row.key = metric.key;
      row.label = metric.label;
      row.unit = metric.unit;
      row.direction = metric.direction;
      row.category = metric.category;
      row.baseline = metric.value;
      std::tie(row.threshold, row.threshold_from) = threshold_for(metric, options);
      row.status = row.threshold.off ? GateStatus::ignored : GateStatus::missing;
      row.note = "not in the current results";
      result.rows.push_back(row);
      continue;
    }
    result.rows.push_back(compare_metric(metric, *found->second, options));
    current_by_key.erase(found);
  }
  for (const Metric& metric : current.metrics) {
    if (!current_by_key.count(metric.key)) continue;
    GateRow row;
    row.key = metric.key;
    row.label = metric.label;
    row.unit = metric.unit;
    row.category = metric.category;
    row.direction = metric.direction;
    row.current = metric.value;
    row.status = GateStatus::added;
    row.note = "not in the baseline";
    result.rows.push_back(row);
  }
  for (const GateRow& row : result.rows)
    result.regressed =
        result.regressed || row.status == GateStatus::regressed || row.status == GateStatus::missing;
  return result;
}

std::string render_gate_table(const GateResult& result) {
  TextTable table({"metric", "baseline", "current", "change", "threshold", "status", "note"});
  table.align_left(5);
  table.align_left(6);
  for (const GateRow& row : result.rows) {
    table.add_row({row.key, value_text(row.baseline, row), value_text(row.current, row),
                   row.change ? signed_percent(*row.change) : "-",
                   (row.direction == Direction::higher_is_better ? "-" : "+") + describe(row.threshold),
                   row.status == GateStatus::regressed || row.status == GateStatus::missing
                       ? upper(status_name(row.status))
                       : std::string(status_name(row.status)),
                   row.note});
  }
  std::string text = table.render();
  int regressed = 0, missing = 0, noise = 0, incomparable = 0;
  for (const GateRow& row : result.rows) {
    regressed += row.status == GateStatus::regressed;
    missing += row.status == GateStatus::missing;
    noise += row.status == GateStatus::within_noise;
    incomparable += row.status == GateStatus::not_comparable;
  }
  text += result.regressed ? "gate: FAILED (" + std::to_string(regressed) + " regressed, " +
                                 std::to_string(missing) + " missing)"
                           : std::string("gate: passed");
  if (noise) text += "; " + std::to_string(noise) + " within noise";
  if (incomparable) text += "; " + std::to_string(incomparable) + " not comparable (not gated)";
  return text + "\n";
}

Json to_json(const GateResult& result, const GateOptions& options) {
  Json rows = Json::array();
  auto optional = [](const std::optional<double>& value) {
    return value && std::isfinite(*value) ? Json(*value) : Json(nullptr);
  };
  for (const GateRow& row : result.rows)
    rows.push_back(
        {{"key", row.key},
         {"label", row.label},
         {"unit", row.unit},
         {"category", category_name(row.category)},
         {"direction", row.direction == Direction::higher_is_better ? "higher_is_better" : "lower_is_better"},
         {"baseline", optional(row.baseline)},
         {"current", optional(row.current)},
         {"change", optional(row.change)},
         {"noise", optional(row.noise)},
         {"threshold", describe(row.threshold)},
         {"threshold_from", row.threshold_from},
         {"status", status_name(row.status)},
         {"note", row.note}});
  return {{"schema_version", kResultsSchemaVersion},
          {"kind", "gate"},
          {"baseline", result.baseline_path},
          {"current", result.current_path},
          {"results_kind", result.kind},
          {"max_regression", describe(options.max_regression)},
          {"regressed", result.regressed},
          {"metrics", rows}};
}

}  // namespace ipj::report
