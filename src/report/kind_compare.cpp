// Section of `ipj compare` (compare.json): the two recipes side by side, their per-epoch curves overlaid
// (read from the baseline/ and optimized/ run folders next to compare.json when they are there).
#include <filesystem>

#include "ipj/core/error.hpp"
#include "kinds.hpp"
#include "text_format.hpp"

namespace ipj::report {
namespace {

struct Side {
  std::string name;  // baseline | optimized
  std::string precision;
  double test_acc = 0, samples_per_s = 0;
  std::optional<double> wall_s, energy_j, time_to_target_s, energy_to_target_j, acc_per_kj, epochs_completed;
  energy::ReportedSource energy_source;
  EnergyProvenance provenance;
  std::vector<EpochRow> epochs;  // from the run folder's results.json, when present
};

Side read_side(const Fields& fields, const Json& json, const char* name) {
  const Json& side_json = fields.object(json, name);
  Side side;
  side.name = name;
  side.test_acc = fields.number(side_json, "test_acc", name);
  side.samples_per_s = fields.number(side_json, "samples_per_s", name);
  side.wall_s = fields.optional_number(side_json, "wall_s", name);
  side.energy_source = read_energy_source(fields, side_json, "energy_source", name);
  side.energy_j = fields.optional_number(side_json, "energy_j", name);
  side.time_to_target_s = fields.optional_number(side_json, "time_to_target_s", name);
  side.energy_to_target_j = fields.optional_number(side_json, "energy_to_target_j", name);
  side.acc_per_kj = fields.optional_number(side_json, "acc_per_kj", name);
  side.epochs_completed = fields.optional_number(side_json, "epochs_completed", name);
  side.precision = fields.optional_text(side_json, "precision", "?", name);
  side.provenance.source = energy::reported_source_name(side.energy_source);
  side.provenance.window_s = side.wall_s;
  return side;
}

// The run folder's results.json gives epochs and the energy window; a missing or unreadable one only
// costs the curves (noted), never the report.
void read_run_folder(const std::string& compare_path, Side& side, Section& section) {
  const std::filesystem::path folder = std::filesystem::path(compare_path).parent_path() / side.name;
  const std::string results_path = (folder / "results.json").string();
  std::error_code error;
  if (!std::filesystem::exists(results_path, error)) {
    section.notes.push_back("no per-epoch curves for the " + side.name + " recipe: " + results_path +
                            " is not there (compare.json was moved without its run folders?)");
    return;
  }
  try {
    const ResultsFile run = load_results_file(results_path);
    if (run.kind != "train")
      fail(ErrorCategory::invalid_input, "'" + results_path + "' is not a train result");
    const Fields fields(run.path, run.kind);
    side.epochs = read_epochs(fields, run.json);
    if (const Json* energy = fields.optional_object(run.json, "energy")) {
      const Json& config = fields.object(run.json, "config");
      side.provenance = measurement_provenance(
          fields, *energy, "energy", fields.optional_number(config, "energy_interval_ms", "config"));
      add_device_figures(fields, *energy, "energy", side.name + " ", section);
    }
  } catch (const Error& failure) {
    section.notes.push_back("no per-epoch curves for the " + side.name + " recipe: " + failure.what());
  }
}

std::string optional_text(const std::optional<double>& value, int digits, const std::string& missing) {
  return value ? significant(*value, digits) : missing;
}

}  // namespace

namespace {

// Accuracy, throughput, time and energy to target of both sides, and the ratios between them.
void add_compare_metrics(const Fields& fields, const Json& json, const Side& baseline, const Side& optimized,
                         const std::string& model, Section& section) {
  for (const Side* side : {&baseline, &optimized}) {
    const bool headline = side == &optimized;
    const std::string& name = side->name;
    section.metrics.push_back(make_metric(name + ".test_acc", name + ": final test accuracy", "",
                                          side->test_acc, Direction::higher_is_better,
                                          MetricCategory::accuracy, headline));
    section.metrics.push_back(make_metric(name + ".samples_per_s", name + ": training throughput",
                                          "samples/s", side->samples_per_s, Direction::higher_is_better,
                                          MetricCategory::throughput, headline));
    if (side->time_to_target_s)
      section.metrics.push_back(make_metric(name + ".time_to_target_s", name + ": time to target", "s",
                                            *side->time_to_target_s, Direction::lower_is_better,
                                            MetricCategory::time));
    if (side->energy_source) {
      if (side->energy_to_target_j) {
        Metric metric = make_metric(name + ".energy_to_target_j", name + ": energy to target", "J",
                                    *side->energy_to_target_j, Direction::lower_is_better,
                                    MetricCategory::energy, headline);
        metric.energy = side->provenance;
        section.metrics.push_back(metric);
        section.energy.push_back({metric.label, metric.value, "J", side->provenance});
      }
      if (side->energy_j) {
        section.energy.push_back({name + ": energy of the run", *side->energy_j, "J", side->provenance});
        section.pareto.push_back({model + " " + name + " recipe", side->test_acc, *side->energy_j,
                                  energy::source_name(*side->energy_source), EnergyDomain::training});
      }
    }
  }
  if (const auto speedup = fields.optional_number(json, "speedup"))
    section.metrics.push_back(make_metric("speedup", "speed-up to target (baseline time / optimized)", "x",
                                          *speedup, Direction::higher_is_better, MetricCategory::time));
  if (const auto ratio = fields.optional_number(json, "energy_ratio");
      ratio && baseline.energy_source == optimized.energy_source && baseline.energy_source) {
    Metric metric = make_metric("energy_ratio", "energy to target, optimized / baseline", "x", *ratio,
                                Direction::lower_is_better, MetricCategory::energy);
    metric.energy = optimized.provenance;
    section.metrics.push_back(metric);
  }
  if (const auto ratio = fields.optional_number(json, "throughput_ratio"))
    section.metrics.push_back(make_metric("throughput_ratio", "training throughput, optimized / baseline",
                                          "x", *ratio, Direction::higher_is_better,
                                          MetricCategory::throughput));
}

// The side-by-side table of `ipj compare`.
Table compare_table(const Fields& fields, const Json& json, const Side& baseline, const Side& optimized,
                    const std::string& target_text) {
  const auto delta = fields.optional_number(json, "acc_delta_pt");
  Table table;
  table.title = "Baseline vs optimized";
  table.header = {"", "baseline (seed recipe)", "optimized (ipj)", "optimized vs baseline"};
  table.rows.push_back({"final test accuracy", fixed(baseline.test_acc, 4), fixed(optimized.test_acc, 4),
                        delta ? (*delta >= 0 ? "+" : "") + fixed(*delta, 2) + " pt" : ""});
  const auto speedup = fields.optional_number(json, "speedup");
  table.rows.push_back({"time to " + target_text + " (s)",
                        optional_text(baseline.time_to_target_s, 4, "not reached"),
                        optional_text(optimized.time_to_target_s, 4, "not reached"),
                        speedup ? fixed(*speedup, 2) + "x faster" : "n/a"});
  const auto energy_ratio = fields.optional_number(json, "energy_ratio");
  table.rows.push_back({"energy to " + target_text + " (J)",
                        optional_text(baseline.energy_to_target_j, 4, "not reached"),
                        optional_text(optimized.energy_to_target_j, 4, "not reached"),
                        energy_ratio ? fixed(*energy_ratio, 2) + "x the energy" : "n/a"});
  table.rows.push_back({"energy source", energy::reported_source_name(baseline.energy_source),
                        energy::reported_source_name(optimized.energy_source), ""});
  const auto throughput_ratio = fields.optional_number(json, "throughput_ratio");
  table.rows.push_back({"training samples/s", significant(baseline.samples_per_s, 4),
                        significant(optimized.samples_per_s, 4),
                        throughput_ratio ? fixed(*throughput_ratio, 2) + "x" : ""});
  table.rows.push_back({"accuracy per kJ", optional_text(baseline.acc_per_kj, 4, "-"),
                        optional_text(optimized.acc_per_kj, 4, "-"), ""});
  table.rows.push_back({"precision", baseline.precision, optimized.precision, ""});
  table.rows.push_back({"epochs run", optional_text(baseline.epochs_completed, 3, "-"),
                        optional_text(optimized.epochs_completed, 3, "-"), ""});
  return table;
}

// Time and energy to the target as bars relative to the baseline: always there, also without the run
// folders; the training throughput when a run missed the target.
Chart target_bars(const Side& baseline, const Side& optimized, const std::string& target_text) {
  Chart bars;
  bars.title = "Time and energy to " + target_text;
  bars.kind = ChartKind::bar;
  bars.x.categories = {"baseline", "optimized"};
  bars.x.label = "recipe";
  bars.y.label = "relative to baseline";
  bars.y.unit = "x";
  bars.y.include_zero = true;
  bars.caption = "1.0 = the baseline; lower is better. Energy source: " +
                 energy::reported_source_name(optimized.energy_source);
  Series time_series{"time to target", {}, {}, false, 0};
  Series energy_series{"energy to target", {}, {}, false, 1};
  if (baseline.time_to_target_s && optimized.time_to_target_s && *baseline.time_to_target_s > 0) {
    time_series.points = {{0, 1.0}, {1, *optimized.time_to_target_s / *baseline.time_to_target_s}};
    time_series.point_labels = {significant(*baseline.time_to_target_s, 4) + " s",
                                significant(*optimized.time_to_target_s, 4) + " s"};
  }
  if (baseline.energy_to_target_j && optimized.energy_to_target_j && *baseline.energy_to_target_j > 0) {
    energy_series.points = {{0, 1.0}, {1, *optimized.energy_to_target_j / *baseline.energy_to_target_j}};
    energy_series.point_labels = {significant(*baseline.energy_to_target_j, 4) + " J",
                                  significant(*optimized.energy_to_target_j, 4) + " J"};
  }
  if (time_series.points.empty() && energy_series.points.empty()) {
    // A run missed the target: compare what both have, training throughput.
    bars.title = "Training throughput";
    bars.y.label = "throughput";
    bars.y.unit = "samples/s";
    bars.caption = "a run missed the target, so time and energy to it cannot be compared";
    bars.series.push_back(
        {"samples/s", {{0, baseline.samples_per_s}, {1, optimized.samples_per_s}}, {}, false, 0});
  } else {
    if (!time_series.points.empty()) bars.series.push_back(time_series);
    if (!energy_series.points.empty()) bars.series.push_back(energy_series);
  }
  return bars;
}

}  // namespace

Section build_compare_section(const ResultsFile& file) {
  const Fields fields(file.path, file.kind);
  const Json& json = file.json;
  Section section;
  Side baseline = read_side(fields, json, "baseline");
  Side optimized = read_side(fields, json, "optimized");
  read_run_folder(file.path, baseline, section);
  read_run_folder(file.path, optimized, section);
  std::string model = "?";
  if (const Json* model_json = fields.optional_object(json, "model"))
    model = fields.optional_text(*model_json, "name", "?", "model");
  const auto target = fields.optional_number(json, "target_acc");
  section.title = "Compare: " + model + ", seed recipe vs ipj's optimized recipe";
  section.facts.emplace_back("model", model);
  if (target) section.facts.emplace_back("target accuracy", fixed(*target, 3));
  section.facts.emplace_back("precision", baseline.precision + " vs " + optimized.precision);
  if (const Json* dataset = fields.optional_object(json, "dataset"))
    section.facts.emplace_back("data set", fields.optional_text(*dataset, "name", "?", "dataset"));
  if (const Json* environment = fields.optional_object(json, "environment"))
    section.environment = *environment;

  add_compare_metrics(fields, json, baseline, optimized, model, section);
  if (const auto within = fields.optional_flag(json, "within_half_point"); within && !*within)
    section.notes.push_back(
        "the optimized recipe is more than 0.5 point less accurate (fails the seeds' rule)");
  const std::string target_text = target ? fixed(*target, 3) : "target";
  section.tables.push_back(compare_table(fields, json, baseline, optimized, target_text));
  if (!baseline.epochs.empty() || !optimized.epochs.empty())
    section.charts = epoch_charts({{"baseline", baseline.epochs}, {"optimized", optimized.epochs}});
  section.charts.insert(section.charts.begin(), target_bars(baseline, optimized, target_text));
  return section;
}

}  // namespace ipj::report
