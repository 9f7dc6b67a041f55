// The HTML report: one self-contained document (inline CSS and SVG; no scripts; a Content-Security-Policy
// that forbids any fetch), every piece of text from files escaped.
#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <sstream>

#include "html_style.hpp"
#include "ipj/report/report.hpp"
#include "ipj/report/results_file.hpp"
#include "ipj/report/svg_chart.hpp"
#include "report_parts.hpp"
#include "text_format.hpp"

namespace ipj::report {
namespace {

std::string source_badge(const std::string& source) {
  std::string css = source;
  for (char& character : css)
    if (!std::isalnum(static_cast<unsigned char>(character))) character = '-';
  return "<span class=\"source source-" + html_escape(css) + "\">" + html_escape(source) + "</span>";
}

std::string status_badge(GateStatus status) {
  std::string css = status_name(status);
  for (char& character : css)
    if (character == ' ') character = '-';
  return "<span class=\"status status-" + css + "\">" + html_escape(status_name(status)) + "</span>";
}

void write_table(const Table& table, std::ostringstream& out) {
  out << "<div class=\"table-wrap\"><table class=\"data\">";
  if (!table.title.empty()) out << "<caption>" << html_escape(table.title) << "</caption>";
  out << "<thead><tr>";
  for (const std::string& cell : table.header)
    out << "<th scope=\"col\">" << html_escape(cell) << "</th>";
  out << "</tr></thead><tbody>";
  for (const auto& row : table.rows) {
    out << "<tr>";
    for (std::size_t column = 0; column < row.size(); ++column) {
      const std::string& cell = row[column];
      if (column == 0 && !looks_numeric(cell)) {
        out << "<th scope=\"row\">" << html_escape(cell) << "</th>";
      } else {
        out << "<td" << (looks_numeric(cell) ? " class=\"num\"" : "") << ">" << html_escape(cell) << "</td>";
      }
    }
    out << "</tr>";
  }
  out << "</tbody></table></div>";
}

void write_chart(const Chart& chart, const std::string& id, std::ostringstream& out) {
  out << "<figure class=\"chart-figure\"><figcaption>" << html_escape(chart.title) << "</figcaption>"
      << "<div class=\"chart-scroll\">" << render_svg_chart(chart, id) << "</div>";
  if (!chart.caption.empty()) out << "<p class=\"caption\">" << html_escape(chart.caption) << "</p>";
  out << "</figure>";
}

std::string cell(const std::optional<Metric>& metric) {
  return metric ? html_escape(metric_text(*metric)) : "-";
}

void write_summary(const std::vector<Section>& sections, std::ostringstream& out) {
  out << "<section id=\"summary\"><h2>Summary</h2><div class=\"table-wrap\"><table class=\"summary\">"
      << "<thead><tr><th>#</th><th>kind</th><th>result</th><th>accuracy</th><th>throughput</th><th>energy</"
         "th>"
      << "<th>energy source</th></tr></thead><tbody>";
  for (const SummaryRow& row : summary_rows(sections)) {
    const Section& section = *row.section;
    out << "<tr><td class=\"num\"><a href=\"#result-" << row.index << "\">" << row.index << "</a></td><td>"
        << html_escape(section.kind) << "</td><td>" << html_escape(section.title) << "<div class=\"path\">"
        << html_escape(section.path) << "</div></td>";
    auto metric_cell = [&](const std::optional<Metric>& metric) {
      out << "<td class=\"num\">" << cell(metric);
      if (metric) out << "<div class=\"meta\">" << html_escape(metric->label) << "</div>";
      out << "</td>";
    };
    metric_cell(row.accuracy);
    metric_cell(row.throughput);
    metric_cell(row.energy);
    out << "<td>" << (row.energy && row.energy->energy ? source_badge(row.energy->energy->source) : "-")
        << "</td></tr>";
  }
  out << "</tbody></table></div>";
  std::vector<std::string> notes;
  for (std::size_t index = 0; index < sections.size(); ++index)
    for (const std::string& note : sections[index].notes)
      notes.push_back("#" + std::to_string(index + 1) + ": " + note);
  if (!notes.empty()) {
    out << "<ul class=\"notes\">";
    for (const std::string& note : notes)
      out << "<li>" << html_escape(note) << "</li>";
    out << "</ul>";
  }
  out << "</section>";
}

void write_deltas(const std::vector<DeltaGroup>& groups, std::ostringstream& out) {
  if (groups.empty()) return;
  out << "<section id=\"deltas\"><h2>Changes between results of the same kind</h2>"
      << "<p class=\"meta\">Each later result is compared with the first of its kind, as <code>ipj gate "
      << "--max-regression 5%</code> would; energy is compared only between equal sources with a window of "
      << "at least 60 samples at 1 Hz or faster (MLPerf power rules).</p>";
  for (const DeltaGroup& group : groups) {
    out << "<h3>#" << group.current_index << " vs #" << group.baseline_index << " ("
        << html_escape(group.result.kind) << ")"
        << (std::any_of(group.result.rows.begin(), group.result.rows.end(),
                        [](const GateRow& row) { return row.status == GateStatus::regressed; })
                ? " &mdash; regressions"
                : "")
        << "</h3><div class=\"table-wrap\"><table class=\"deltas\"><thead><tr><th>metric</th><th>#"
        << group.baseline_index << "</th><th>#" << group.current_index
        << "</th><th>change</th><th>status</th><th>note</th></tr></thead><tbody>";
    int unmatched = 0;
    for (const GateRow& row : group.result.rows) {
      if (row.status == GateStatus::missing || row.status == GateStatus::added) {
        ++unmatched;
        continue;
      }
      auto value = [&](const std::optional<double>& number) {
        if (!number) return std::string("-");
        return row.category == MetricCategory::accuracy && row.unit.empty() ? fixed(*number, 4)
                                                                            : with_unit(*number, row.unit);
      };
      out << "<tr><th scope=\"row\">" << html_escape(row.label) << "</th><td class=\"num\">"
          << html_escape(value(row.baseline)) << "</td><td class=\"num\">" << html_escape(value(row.current))
          << "</td><td class=\"num\">" << (row.change ? html_escape(signed_percent(*row.change)) : "-")
          << "</td><td>" << status_badge(row.status) << "</td><td>" << html_escape(row.note) << "</td></tr>";
    }
    out << "</tbody></table></div>";
    if (unmatched > 0)
      out << "<p class=\"meta\">" << unmatched
          << " metric(s) appear in only one of the two results (different "
          << "variants, batch sizes or levels) and are not compared.</p>";
  }
  out << "</section>";
}

void write_pareto(const std::vector<Section>& sections, std::ostringstream& out) {
  const std::vector<Chart> charts = pareto_charts(sections);
  out << "<section id=\"pareto\"><h2>Accuracy vs energy</h2>";
  if (charts.empty()) {
    out << "<p class=\"meta\">None of these results holds both an accuracy and an energy figure.</p>";
  } else {
    out << "<div class=\"charts\">";
    for (std::size_t index = 0; index < charts.size(); ++index)
      write_chart(charts[index], "pareto-" + std::to_string(index + 1), out);
    out << "</div>";
  }
  out << "</section>";
}

void write_section(const Section& section, std::size_t index, std::ostringstream& out) {
  out << "<section class=\"result\" id=\"result-" << index << "\"><h2><span class=\"kind\">"
      << html_escape(section.kind) << "</span>" << index << ". " << html_escape(section.title) << "</h2>"
      << "<div class=\"path\">" << html_escape(section.path) << "</div>";
  if (!section.facts.empty()) {
    out << "<dl class=\"facts\">";
    for (const auto& [name, value] : section.facts)
      out << "<dt>" << html_escape(name) << "</dt><dd>" << html_escape(value) << "</dd>";
    out << "</dl>";
  }
  if (!section.notes.empty()) {
    out << "<ul class=\"notes\">";
    for (const std::string& note : section.notes)
      out << "<li>" << html_escape(note) << "</li>";
    out << "</ul>";
  }
  if (!section.charts.empty()) {
    out << "<div class=\"charts\">";
    for (std::size_t chart = 0; chart < section.charts.size(); ++chart)
      write_chart(section.charts[chart], "chart-" + std::to_string(index) + "-" + std::to_string(chart + 1),
                  out);
    out << "</div>";
  }
  for (const Table& table : section.tables)
    write_table(table, out);
  out << "</section>";
}

void write_energy(const std::vector<Section>& sections, std::ostringstream& out) {
  out << "<section id=\"energy\"><h2>Energy provenance</h2><p class=\"meta\">Every energy figure in this "
      << "report, with its source: <em>counter</em> (hardware energy counter: RAPL, NVML), "
         "<em>integrated</em> "
      << "(power samples integrated over time) or <em>estimated</em> (a model, no sensor: the model is "
      << "given).</p><div class=\"table-wrap\"><table class=\"energy\"><thead><tr><th>#</th><th>figure</th>"
      << "<th>value</th><th>source</th><th>window</th><th>estimate model</th></tr></thead><tbody>";
  bool any = false;
  for (std::size_t index = 0; index < sections.size(); ++index)
    for (const EnergyFigure& figure : sections[index].energy) {
      any = true;
      out << "<tr><td class=\"num\"><a href=\"#result-" << index + 1 << "\">" << index + 1 << "</a></td><td>"
          << html_escape(figure.where) << "</td><td class=\"num\">"
          << html_escape(with_unit(figure.value, figure.unit)) << "</td><td>"
          << source_badge(figure.provenance.source) << "</td><td>"
          << html_escape(window_text(figure.provenance)) << "</td><td class=\"model\">"
          << html_escape(figure.provenance.model.empty()
                             ? (figure.provenance.source == "estimated" ? "not recorded in the file" : "-")
                             : figure.provenance.model)
          << "</td></tr>";
    }
  if (!any) out << "<tr><td colspan=\"6\">No energy figures in these results.</td></tr>";
  out << "</tbody></table></div></section>";
}

void write_machines(const std::vector<Section>& sections, std::ostringstream& out) {
  out << "<section id=\"machine\"><h2>Machine and software</h2>";
  // Identical environments are shown once, with the results they belong to.
  std::vector<std::pair<std::string, std::vector<std::size_t>>> environments;
  for (std::size_t index = 0; index < sections.size(); ++index) {
    if (!sections[index].environment.is_object()) continue;
    const std::string dumped = sections[index].environment.dump();
    auto found = std::find_if(environments.begin(), environments.end(),
                              [&](const auto& entry) { return entry.first == dumped; });
    if (found == environments.end()) {
      environments.push_back({dumped, {index}});
    } else {
      found->second.push_back(index);
    }
  }
  std::set<std::size_t> described;
  for (const auto& [dumped, members] : environments) {
    std::string which;
    for (const std::size_t member : members) {
      which += (which.empty() ? "#" : ", #") + std::to_string(member + 1);
      described.insert(member);
    }
    Table table;
    table.title = "Results " + which;
    table.header = {"property", "value"};
    for (const auto& [name, value] : environment_facts(sections[members.front()].environment))
      table.rows.push_back({name, value});
    write_table(table, out);
  }
  std::string without;
  for (std::size_t index = 0; index < sections.size(); ++index)
    if (!described.count(index)) without += (without.empty() ? "#" : ", #") + std::to_string(index + 1);
  if (!without.empty())
    out << "<p class=\"meta\">Results " << html_escape(without)
        << " do not record the machine (ipj writes it into "
        << "train and compare results; for the others, keep <code>ipj devices --json</code> with them).</p>";
  out << "</section>";
}

}  // namespace

std::vector<Section> load_sections(const std::vector<std::string>& paths) {
  std::vector<Section> sections;
  for (const std::string& path : paths)
    sections.push_back(build_section(load_results_file(path)));
  return sections;
}

int count_charts(const std::vector<Section>& sections) {
  int charts = static_cast<int>(pareto_charts(sections).size());
  for (const Section& section : sections)
    charts += static_cast<int>(section.charts.size());
  return charts;
}

std::string render_html_report(const std::vector<Section>& sections, const ReportOptions& options) {
  std::ostringstream out;
  const std::string generated = options.generated_at.empty() ? utc_now() : options.generated_at;
  out << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
      << "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src "
         "'unsafe-inline'; "
      << "img-src data:\">"
      << "<meta name=\"generator\" content=\"" << html_escape(options.generator) << "\">"
      << "<title>" << html_escape(options.title) << "</title><style>" << kReportStyle
      << "</style></head><body><main>"
      << "<header class=\"report-header\"><h1>" << html_escape(options.title) << "</h1><p class=\"meta\">"
      << sections.size() << " results file" << (sections.size() == 1 ? "" : "s") << " &middot; generated by "
      << html_escape(options.generator) << " on " << html_escape(generated) << "</p></header>";
  out << "<nav class=\"toc\"><a href=\"#summary\">Summary</a>";
  if (sections.size() > 1) out << "<a href=\"#deltas\">Changes</a>";
  out << "<a href=\"#pareto\">Accuracy vs energy</a>";
  for (std::size_t index = 0; index < sections.size(); ++index)
    out << "<a href=\"#result-" << index + 1 << "\">" << index + 1 << ". "
        << html_escape(sections[index].kind) << "</a>";
  out << "<a href=\"#energy\">Energy provenance</a><a href=\"#machine\">Machine</a></nav>";
  write_summary(sections, out);
  write_deltas(delta_groups(sections), out);
  write_pareto(sections, out);
  for (std::size_t index = 0; index < sections.size(); ++index)
    write_section(sections[index], index + 1, out);
  write_energy(sections, out);
  write_machines(sections, out);
  out << "<footer>Charts and tables are drawn by ipj from the results files alone; hover a point for its "
      << "value. Accuracy is on the test set. Energy figures carry their source; estimates are models, not "
      << "measurements.</footer></main></body></html>\n";
  return out.str();
}

}  // namespace ipj::report
