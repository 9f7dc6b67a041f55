// The built-in kinds' section builders and helpers they share. Private to src/report.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fields.hpp"
#include "ipj/energy/measurement.hpp"
#include "ipj/report/results_file.hpp"

namespace ipj::report {

Section build_train_section(const ResultsFile& file);
Section build_repeat_section(const ResultsFile& file);
Section build_compare_section(const ResultsFile& file);
Section build_bench_section(const ResultsFile& file);
Section build_load_section(const ResultsFile& file);
Section build_quantize_section(const ResultsFile& file);
Section build_prune_section(const ResultsFile& file);
Section build_distill_section(const ResultsFile& file);
Section build_measure_section(const ResultsFile& file);

// Provenance of an energy::Measurement JSON object (`energy` of train results, `ipj measure --json`):
// source, the estimate models of its devices, window and samples (recorded, or derived from
// `interval_ms` when the file predates recorded samples).
EnergyProvenance measurement_provenance(const Fields& fields, const Json& measurement,
                                        const std::string& where, std::optional<double> interval_ms);
// `parent[key]` as an energy source, "none" when absent. Results files of every ipj version spell it
// counter | integrated | estimated | none; other text throws Error(invalid_input) naming where it is.
energy::ReportedSource read_energy_source(const Fields& fields, const Json& parent, const std::string& key,
                                          const std::string& where);
// One energy figure per device of a measurement object ("device NAME").
void add_device_figures(const Fields& fields, const Json& measurement, const std::string& where,
                        const std::string& prefix, Section& section);

// A metric with everything set; `headline` ones appear in the summary table.
Metric make_metric(std::string key, std::string label, std::string unit, double value, Direction direction,
                   MetricCategory category, bool headline = false);

// Fractions 0..1: the y axis of accuracy charts.
Axis accuracy_axis(const std::string& label);

}  // namespace ipj::report

namespace ipj::report {

// One epoch of a train results file.
struct EpochRow {
  double epoch = 0, loss = 0, test_acc = 0;
  std::optional<double> train_acc, test_loss, lr, samples_per_s, wall_s, energy_j;
  energy::ReportedSource energy_source;
};
std::vector<EpochRow> read_epochs(const Fields& fields, const Json& results);

// Per-epoch charts of one or more runs overlaid (accuracy, loss, energy; accuracy vs cumulative energy).
// `runs`: (name, epochs) pairs; `dashed`: draw every run after the first dashed.
std::vector<Chart> epoch_charts(const std::vector<std::pair<std::string, std::vector<EpochRow>>>& runs);

}  // namespace ipj::report
