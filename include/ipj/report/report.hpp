// `ipj report`: one self-contained HTML file (inline CSS and SVG, no scripts, no network) and a Markdown
// summary for pull-request comments, from any mix of ipj results files. LibTorch-free.
#pragma once

#include <string>
#include <vector>

#include "ipj/report/report_model.hpp"

namespace ipj::report {

struct ReportOptions {
  std::string title = "ipj report";
  std::string generator = "ipj";  // shown in the header, e.g. "ipj 0.1.0"
  std::string generated_at;       // shown in the header; empty = now (UTC)
};

// Loads and builds one section per path, in order (errors name the file; see load_results_file).
std::vector<Section> load_sections(const std::vector<std::string>& paths);

// The HTML document: summary, deltas between results of the same kind, accuracy-vs-energy scatter with
// Pareto frontiers, one part per file (facts, notes, charts, tables), energy provenance, machine and
// software.
std::string render_html_report(const std::vector<Section>& sections, const ReportOptions& options);

// The Markdown variant: summary table, key deltas, the main table of each file, energy sources; no images.
std::string render_markdown_report(const std::vector<Section>& sections, const ReportOptions& options);

// Charts the HTML report draws for these sections (the per-file ones plus the accuracy-vs-energy ones).
int count_charts(const std::vector<Section>& sections);

}  // namespace ipj::report
