// Parts shared by the HTML and Markdown reports: summary rows, deltas between results of the same kind,
// accuracy-vs-energy charts, machine facts. Private to src/report.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ipj/report/gate.hpp"
#include "ipj/report/report_model.hpp"

namespace ipj::report {

struct SummaryRow {
  std::size_t index = 0;  // 1-based position of the file
  const Section* section = nullptr;
  std::optional<Metric> accuracy, throughput, energy;
};
std::vector<SummaryRow> summary_rows(const std::vector<Section>& sections);

// Every later result of a kind compared with the first of that kind (default gate thresholds).
struct DeltaGroup {
  std::size_t baseline_index = 0, current_index = 0;  // 1-based
  GateResult result;
};
std::vector<DeltaGroup> delta_groups(const std::vector<Section>& sections);

// Accuracy vs training joules and vs J/1000 inferences, one series (and frontier) per energy source.
std::vector<Chart> pareto_charts(const std::vector<Section>& sections);

// Flattened `ipj devices --json` object: ("cpu.model", "AMD EPYC"), ("cpu.features", "avx2, fma3"), ...
std::vector<std::pair<std::string, std::string>> environment_facts(const Json& environment);

// "0.8814", "26310 samples/s", "1.18e-03 J/sample".
std::string metric_text(const Metric& metric);
// Window, samples and rate of an energy figure: "0.38 s, 4 samples at 10 Hz (derived)".
std::string window_text(const EnergyProvenance& provenance);
// "2026-12-03 08:30 UTC".
std::string utc_now();

}  // namespace ipj::report
