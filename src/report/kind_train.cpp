// Sections of `ipj train` results (results.json) and `ipj train --repeat` summaries (repeat.json), and the
// helpers other kinds share: metrics, energy provenance, per-epoch curves.
#include <algorithm>
#include <cmath>
#include <set>

#include "kinds.hpp"
#include "text_format.hpp"

namespace ipj::report {

Metric make_metric(std::string key, std::string label, std::string unit, double value, Direction direction,
                   MetricCategory category, bool headline) {
  Metric metric;
  metric.key = std::move(key);
  metric.label = std::move(label);
  metric.unit = std::move(unit);
  metric.value = value;
  metric.direction = direction;
  metric.category = category;
  metric.headline = headline;
  return metric;
}

Axis accuracy_axis(const std::string& label) {
  Axis axis;
  axis.label = label;
  axis.unit = "%";
  axis.percent = true;
  return axis;
}

energy::ReportedSource read_energy_source(const Fields& fields, const Json& parent, const std::string& key,
                                          const std::string& where) {
  const std::string text = fields.optional_text(parent, key, "none", where);
  try {
    return energy::parse_reported_source(text, key);
  } catch (const Error&) {  // the report's own wording, naming the file and the field
    fields.fail_at(where, key, "is '" + text + "', not one of counter, integrated, estimated, none");
  }
}

EnergyProvenance measurement_provenance(const Fields& fields, const Json& measurement,
                                        const std::string& where, std::optional<double> interval_ms) {
  EnergyProvenance provenance;
  provenance.source =
      energy::reported_source_name(read_energy_source(fields, measurement, "energy_source", where));
  provenance.window_s = fields.optional_number(measurement, "wall_s", where);
  provenance.samples = fields.optional_number(measurement, "samples", where);
  provenance.sample_hz = fields.optional_number(measurement, "sample_hz", where);
  if (!provenance.samples && provenance.window_s && interval_ms && *interval_ms > 0) {
    // Files written before samples were recorded: the monitor reads its meters every interval plus once at
    // each window edge.
    provenance.samples = std::floor(*provenance.window_s * 1000.0 / *interval_ms) + 1.0;
    provenance.sample_hz = 1000.0 / *interval_ms;
    provenance.window_derived = true;
  }
  std::set<std::string> models;
  if (const Json* devices = fields.optional_array(measurement, "devices", where)) {
    for (std::size_t index = 0; index < devices->size(); ++index) {
      const std::string at = indexed(where, "devices", index);
      const std::string model = fields.optional_text((*devices)[index], "model", "", at);
      if (!model.empty() && fields.optional_flag((*devices)[index], "in_total", at).value_or(true))
        models.insert(model);
    }
  }
  for (const std::string& model : models)
    provenance.model += (provenance.model.empty() ? "" : "; ") + model;
  return provenance;
}

void add_device_figures(const Fields& fields, const Json& measurement, const std::string& where,
                        const std::string& prefix, Section& section) {
  const Json* devices = fields.optional_array(measurement, "devices", where);
  if (!devices) return;
  for (std::size_t index = 0; index < devices->size(); ++index) {
    const std::string at = indexed(where, "devices", index);
    const Json& device = (*devices)[index];
    EnergyFigure figure;
    const bool in_total = fields.optional_flag(device, "in_total", at).value_or(true);
    figure.where =
        prefix + "device " + fields.text(device, "name", at) + (in_total ? "" : " (inside another)");
    figure.value = fields.number(device, "energy_j", at);
    figure.unit = "J";
    figure.provenance.source = energy::reported_source_name(read_energy_source(fields, device, "source", at));
    figure.provenance.model = fields.optional_text(device, "model", "", at);
    figure.provenance.window_s = fields.optional_number(measurement, "wall_s", where);
    section.energy.push_back(figure);
  }
}

std::vector<EpochRow> read_epochs(const Fields& fields, const Json& results) {
  std::vector<EpochRow> rows;
  const Json* epochs = fields.optional_array(results, "epochs");
  if (!epochs) return rows;
  for (std::size_t index = 0; index < epochs->size(); ++index) {
    const std::string at = indexed("", "epochs", index);
    const Json& epoch = (*epochs)[index];
    EpochRow row;
    row.epoch = fields.number(epoch, "epoch", at);
    row.loss = fields.number(epoch, "loss", at);
    row.test_acc = fields.number(epoch, "test_acc", at);
    row.train_acc = fields.optional_number(epoch, "train_acc", at);
    row.test_loss = fields.optional_number(epoch, "test_loss", at);
    row.lr = fields.optional_number(epoch, "lr", at);
    row.samples_per_s = fields.optional_number(epoch, "samples_per_s", at);
    row.wall_s = fields.optional_number(epoch, "wall_s", at);
    row.energy_source = read_energy_source(fields, epoch, "energy_source", at);
    if (row.energy_source) row.energy_j = fields.optional_number(epoch, "energy_j", at);
    rows.push_back(row);
  }
  return rows;
}

std::vector<Chart> epoch_charts(const std::vector<std::pair<std::string, std::vector<EpochRow>>>& runs) {
  Chart accuracy, loss, energy, accuracy_per_joule;
  accuracy.title = "Accuracy per epoch";
  accuracy.caption = "solid: test accuracy; dashed: training accuracy (running, over the epoch)";
  accuracy.x.label = "epoch";
  accuracy.y = accuracy_axis("accuracy");
  loss.title = "Loss per epoch";
  loss.caption = "solid: training loss (mean over the epoch); dashed: test loss";
  loss.x.label = "epoch";
  loss.y.label = "cross-entropy loss";
  loss.y.include_zero = true;
  energy.title = "Energy per epoch";
  energy.x.label = "epoch";
  energy.y.label = "energy";
  energy.y.unit = "J";
  energy.y.include_zero = true;
  accuracy_per_joule.title = "Test accuracy vs cumulative energy";
  accuracy_per_joule.x.label = "cumulative energy";
  accuracy_per_joule.x.unit = "J";
  accuracy_per_joule.x.include_zero = true;
  accuracy_per_joule.y = accuracy_axis("test accuracy");
  std::set<std::string> sources;
  for (std::size_t run = 0; run < runs.size(); ++run) {
    const auto& [name, epochs] = runs[run];
    const std::string prefix = runs.size() > 1 ? name + " " : "";
    Series test{prefix + "test", {}, {}, false, static_cast<int>(run)};
    Series train{prefix + "train", {}, {}, true, static_cast<int>(run)};
    Series train_loss{prefix + "training loss", {}, {}, false, static_cast<int>(run)};
    Series test_loss{prefix + "test loss", {}, {}, true, static_cast<int>(run)};
    Series joules{runs.size() > 1 ? name : "energy", {}, {}, false, static_cast<int>(run)};
    Series cumulative{runs.size() > 1 ? name : "test accuracy", {}, {}, false, static_cast<int>(run)};
    double total_j = 0.0;
    for (const EpochRow& row : epochs) {
      test.points.emplace_back(row.epoch, row.test_acc);
      if (row.train_acc) train.points.emplace_back(row.epoch, *row.train_acc);
      train_loss.points.emplace_back(row.epoch, row.loss);
      if (row.test_loss) test_loss.points.emplace_back(row.epoch, *row.test_loss);
      if (row.energy_j) {
        sources.insert(energy::reported_source_name(row.energy_source));
        joules.points.emplace_back(row.epoch, *row.energy_j);
        total_j += *row.energy_j;
        cumulative.points.emplace_back(total_j, row.test_acc);
        cumulative.point_labels.push_back("epoch " + significant(row.epoch, 3));
      }
    }
    accuracy.series.push_back(test);
    if (!train.points.empty()) accuracy.series.push_back(train);
    loss.series.push_back(train_loss);
    if (!test_loss.points.empty()) loss.series.push_back(test_loss);
    if (!joules.points.empty()) energy.series.push_back(joules);
    if (!cumulative.points.empty()) accuracy_per_joule.series.push_back(cumulative);
  }
  std::string source_text;
  for (const std::string& source : sources)
    source_text += (source_text.empty() ? "" : ", ") + source;
  std::vector<Chart> charts{accuracy, loss};
  if (!energy.series.empty()) {
    energy.caption = "energy source: " + source_text + " (see Energy provenance)";
    accuracy_per_joule.caption = "one point per epoch; energy source: " + source_text;
    charts.push_back(energy);
    charts.push_back(accuracy_per_joule);
  }
  return charts;
}

namespace {

void add_config_facts(const Fields& fields, const Json& config, Section& section) {
  auto add = [&](const char* name, const char* key) {
    const auto found = config.find(key);
    if (found == config.end() || found->is_null()) return;
    section.facts.emplace_back(name, found->is_string() ? found->get<std::string>() : found->dump());
  };
  add("batch", "batch");
  add("learning rate", "lr");
  add("optimizer", "optimizer");
  add("schedule", "schedule");
  add("seed", "seed");
  add("data", "data");
  (void)fields;
}

Table epoch_table(const std::vector<EpochRow>& epochs) {
  Table table;
  table.title = "Epochs";
  table.header = {"epoch", "loss",      "train acc", "test acc", "test loss",
                  "lr",    "samples/s", "wall s",    "energy J", "source"};
  auto optional = [](const std::optional<double>& value, int digits) {
    return value ? significant(*value, digits) : std::string("-");
  };
  for (const EpochRow& row : epochs)
    table.rows.push_back({significant(row.epoch, 3), fixed(row.loss, 4), optional(row.train_acc, 4),
                          fixed(row.test_acc, 4), optional(row.test_loss, 4), optional(row.lr, 3),
                          optional(row.samples_per_s, 4), optional(row.wall_s, 3), optional(row.energy_j, 4),
                          energy::reported_source_name(row.energy_source)});
  return table;
}

}  // namespace

Section build_train_section(const ResultsFile& file) {
  const Fields fields(file.path, file.kind);
  const Json& json = file.json;
  Section section;
  const Json& config = fields.object(json, "config");
  const std::string model = fields.text(config, "model", "config");
  const Json* precision = fields.optional_object(json, "precision");
  const std::string used = precision ? fields.optional_text(*precision, "used", "", "precision")
                                     : fields.optional_text(config, "precision", "", "config");
  section.title = "Training: " + model + (used.empty() ? "" : " " + used);
  section.facts.emplace_back("model", model);
  if (const Json* model_json = fields.optional_object(json, "model"))
    if (const auto parameters = fields.optional_number(*model_json, "parameters", "model"))
      section.facts.emplace_back("parameters", significant(*parameters, 6));
  if (const Json* dataset = fields.optional_object(json, "dataset")) {
    const auto train_samples = fields.optional_number(*dataset, "train_samples", "dataset");
    const auto test_samples = fields.optional_number(*dataset, "test_samples", "dataset");
    section.facts.emplace_back(
        "data set", fields.optional_text(*dataset, "name", "?", "dataset") +
                        (train_samples ? ", " + significant(*train_samples, 6) + " train" : "") +
                        (test_samples ? " / " + significant(*test_samples, 6) + " test samples" : ""));
  }
  if (!used.empty()) section.facts.emplace_back("precision", used);
  add_config_facts(fields, config, section);
  if (const Json* environment = fields.optional_object(json, "environment"))
    section.environment = *environment;

  const std::vector<EpochRow> epochs = read_epochs(fields, json);
  const Json* final_json = fields.optional_object(json, "final");
  if (!final_json) {
    section.notes.push_back("incomplete run: " + std::to_string(epochs.size()) +
                            " epoch(s) so far and no final figures (the run is still going, or was stopped)");
  } else {
    const Json& last = *final_json;
    const double accuracy = fields.number(last, "test_acc", "final");
    section.metrics.push_back(make_metric("test_acc", "final test accuracy", "", accuracy,
                                          Direction::higher_is_better, MetricCategory::accuracy, true));
    section.metrics.push_back(make_metric("samples_per_s", "training throughput", "samples/s",
                                          fields.number(last, "samples_per_s", "final"),
                                          Direction::higher_is_better, MetricCategory::throughput, true));
    const energy::ReportedSource source = read_energy_source(fields, last, "energy_source", "final");
    EnergyProvenance provenance;
    if (const Json* energy = fields.optional_object(json, "energy")) {
      provenance = measurement_provenance(fields, *energy, "energy",
                                          fields.optional_number(config, "energy_interval_ms", "config"));
      add_device_figures(fields, *energy, "energy", "", section);
    }
    provenance.source = energy::reported_source_name(source);
    auto energy_metric = [&](const char* key, const std::string& label, const std::string& unit,
                             Direction direction, bool headline) {
      const auto value = fields.optional_number(last, key, "final");
      if (!value || !source) return;
      Metric metric = make_metric(key, label, unit, *value, direction, MetricCategory::energy, headline);
      metric.energy = provenance;
      section.metrics.push_back(metric);
      section.energy.push_back({label, *value, unit, provenance});
    };
    energy_metric("j_per_sample", "energy per training sample", "J/sample", Direction::lower_is_better, true);
    energy_metric("energy_j", "energy of the run", "J", Direction::lower_is_better, false);
    energy_metric("energy_to_target_j", "energy to target accuracy", "J", Direction::lower_is_better, false);
    energy_metric("acc_per_kj", "accuracy per kJ", "1/kJ", Direction::higher_is_better, false);
    if (const auto time = fields.optional_number(last, "time_to_target_s", "final"))
      section.metrics.push_back(make_metric("time_to_target_s", "time to target accuracy", "s", *time,
                                            Direction::lower_is_better, MetricCategory::time));
    if (const auto energy_j = fields.optional_number(last, "energy_j", "final"); energy_j && source)
      section.pareto.push_back({model + " " + used + " (" + file.path + ")", accuracy, *energy_j,
                                energy::source_name(*source), EnergyDomain::training});
    if (const auto target = fields.optional_number(last, "target_acc", "final"))
      section.facts.emplace_back("target accuracy", fixed(*target, 3));
    if (const auto completed = fields.optional_number(last, "epochs_completed", "final"))
      section.facts.emplace_back("epochs", significant(*completed, 4));
  }
  if (!epochs.empty()) {
    section.charts = epoch_charts({{model, epochs}});
    section.tables.push_back(epoch_table(epochs));
    std::set<energy::ReportedSource> sources;
    for (const EpochRow& row : epochs)
      if (row.energy_j) sources.insert(row.energy_source);
    for (const energy::ReportedSource& source : sources) {
      EnergyFigure figure;
      figure.where = "per-epoch energy (chart and table)";
      figure.unit = "J";
      figure.value = 0.0;
      for (const EpochRow& row : epochs)
        if (row.energy_j && row.energy_source == source) figure.value += *row.energy_j;
      figure.provenance.source = energy::reported_source_name(source);
      if (const Json* energy = fields.optional_object(json, "energy"))
        figure.provenance.model = measurement_provenance(fields, *energy, "energy", std::nullopt).model;
      section.energy.push_back(figure);
    }
  }
  return section;
}

namespace {

// Medians of `summary` with their min..max (the gate treats differences inside them as noise). The energy
// window is the shortest run's, its samples derived from the sampling interval.
void add_repeat_metrics(const Fields& fields, const Json& config, const Json& summary,
                        const std::set<std::string>& sources, std::optional<double> shortest_s,
                        Section& section) {
  EnergyProvenance provenance;
  provenance.source = sources.size() == 1 ? *sources.begin() : sources.empty() ? "none" : "mixed";
  provenance.window_s = shortest_s;
  if (const auto interval = fields.optional_number(config, "energy_interval_ms", "config");
      interval && shortest_s && *interval > 0) {
    provenance.samples = std::floor(*shortest_s * 1000.0 / *interval) + 1.0;
    provenance.sample_hz = 1000.0 / *interval;
    provenance.window_derived = true;
  }
  auto summary_metric = [&](const char* key, const std::string& label, const std::string& unit,
                            Direction direction, MetricCategory category, bool headline) {
    const Json* spread = fields.optional_object(summary, key, "summary");
    if (!spread) return;
    const std::string where = std::string("summary.") + key;
    Metric metric = make_metric(key, label + " (median)", unit, fields.number(*spread, "median", where),
                                direction, category, headline);
    metric.spread = Spread{fields.number(*spread, "min", where), fields.number(*spread, "max", where),
                           static_cast<int>(fields.number(*spread, "count", where))};
    if (category == MetricCategory::energy) {
      if (provenance.source == "none") return;
      metric.energy = provenance;
      section.energy.push_back({metric.label, metric.value, unit, provenance});
    }
    section.metrics.push_back(metric);
  };
  summary_metric("test_acc", "final test accuracy", "", Direction::higher_is_better, MetricCategory::accuracy,
                 true);
  summary_metric("samples_per_s", "training throughput", "samples/s", Direction::higher_is_better,
                 MetricCategory::throughput, true);
  summary_metric("time_to_target_s", "time to target accuracy", "s", Direction::lower_is_better,
                 MetricCategory::time, false);
  summary_metric("energy_to_target_j", "energy to target accuracy", "J", Direction::lower_is_better,
                 MetricCategory::energy, true);
}

}  // namespace

Section build_repeat_section(const ResultsFile& file) {
  const Fields fields(file.path, file.kind);
  const Json& json = file.json;
  Section section;
  const Json& config = fields.object(json, "config");
  const std::string model = fields.text(config, "model", "config");
  const Json& summary = fields.object(json, "summary");
  const Json& runs = fields.array(json, "runs");
  section.title = "Repeated training: " + model + ", " + std::to_string(runs.size()) + " seeds";
  section.facts.emplace_back("model", model);
  section.facts.emplace_back("precision", fields.optional_text(config, "precision", "?", "config"));
  add_config_facts(fields, config, section);
  if (const Json* environment = fields.optional_object(json, "environment"))
    section.environment = *environment;
  if (const auto missed = fields.optional_number(summary, "missed_target", "summary"); missed && *missed > 0)
    section.notes.push_back(significant(*missed, 3) +
                            " run(s) never reached the target accuracy (counted, not "
                            "dropped: the time and energy medians cover the others)");

  // Per-seed values, the sources of their energy and the shortest run (for the energy window).
  Chart accuracy, energy;
  accuracy.title = "Final test accuracy per seed";
  accuracy.kind = ChartKind::bar;
  accuracy.y = accuracy_axis("test accuracy");
  accuracy.y.include_zero = true;
  accuracy.x.label = "seed";
  energy.title = "Energy of each run";
  energy.kind = ChartKind::bar;
  energy.x.label = "seed";
  energy.y.label = "energy";
  energy.y.unit = "J";
  energy.y.include_zero = true;
  Series accuracy_series{"test accuracy", {}, {}, false, 0};
  Series energy_series{"energy of the run", {}, {}, false, 1};
  Series target_series{"energy to target", {}, {}, false, 2};
  Table table;
  table.title = "Runs";
  table.header = {"seed",     "test acc",           "samples/s", "time to target s",
                  "energy J", "energy to target J", "source"};
  std::set<std::string> sources;
  std::optional<double> shortest_s;
  for (std::size_t index = 0; index < runs.size(); ++index) {
    const std::string at = indexed("", "runs", index);
    const double seed = fields.number(runs[index], "seed", at);
    const Json& last = fields.object(runs[index], "final", at);
    const std::string where = at + ".final";
    const double test_acc = fields.number(last, "test_acc", where);
    const auto energy_j = fields.optional_number(last, "energy_j", where);
    const auto to_target = fields.optional_number(last, "energy_to_target_j", where);
    const auto time = fields.optional_number(last, "time_to_target_s", where);
    const energy::ReportedSource source = read_energy_source(fields, last, "energy_source", where);
    const auto wall_s = fields.optional_number(last, "wall_s", where);
    if (wall_s) shortest_s = shortest_s ? std::min(*shortest_s, *wall_s) : *wall_s;
    const double x = static_cast<double>(index);
    accuracy.x.categories.push_back(significant(seed, 6));
    energy.x.categories.push_back(significant(seed, 6));
    accuracy_series.points.emplace_back(x, test_acc);
    if (energy_j && source) {
      sources.insert(energy::source_name(*source));
      energy_series.points.emplace_back(x, *energy_j);
      section.pareto.push_back({model + " seed " + significant(seed, 6), test_acc, *energy_j,
                                energy::source_name(*source), EnergyDomain::training});
    }
    if (to_target && source) target_series.points.emplace_back(x, *to_target);
    table.rows.push_back(
        {significant(seed, 6), fixed(test_acc, 4),
         significant(fields.optional_number(last, "samples_per_s", where).value_or(NAN), 4),
         time ? significant(*time, 4) : "not reached", energy_j ? significant(*energy_j, 4) : "-",
         to_target ? significant(*to_target, 4) : "not reached", energy::reported_source_name(source)});
  }
  accuracy.series.push_back(accuracy_series);
  section.charts.push_back(accuracy);
  if (!energy_series.points.empty()) {
    energy.series.push_back(energy_series);
    if (!target_series.points.empty()) energy.series.push_back(target_series);
    std::string source_text;
    for (const std::string& source : sources)
      source_text += (source_text.empty() ? "" : ", ") + source;
    energy.caption = "energy source: " + source_text;
    section.charts.push_back(energy);
  }
  section.tables.push_back(table);

  add_repeat_metrics(fields, config, summary, sources, shortest_s, section);
  return section;
}

}  // namespace ipj::report
