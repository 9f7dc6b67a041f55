// `ipj report` (HTML + Markdown reports from results files) and `ipj gate` (the CI performance gate).
#include <iostream>

#include "cli_support.hpp"
#include "ipj/core/atomic_file.hpp"
#include "ipj/report/gate.hpp"
#include "ipj/report/report.hpp"
#include "ipj/report/results_file.hpp"

namespace ipj::cli {

CLI::App* register_report_command(CLI::App& app, CommandRunner& runner) {
  auto* command = app.add_subcommand(
      "report",
      "Write one self-contained HTML report (inline SVG charts, no network) and/or a Markdown summary for a\n"
      "pull request from ipj results files (train, compare, repeat, quantize, prune, distill, bench, load,\n"
      "measure; run folders work too)\n"
      "Example: ipj report runs/compare-mlp/compare.json bench.json --html report.html --md report.md");
  static CommonOutputFlags flags;
  static std::vector<std::string> inputs;
  static std::string html_path, markdown_path;
  static report::ReportOptions options;
  add_output_flags(*command, flags);
  command->add_option("results", inputs, "Results files or run folders")->required();
  command->add_option("--html", html_path, "Where to write the HTML report");
  command->add_option("--md", markdown_path, "Where to write the Markdown report");
  command->add_option("--title", options.title, "Report title")->capture_default_str();
  command->callback([&runner] {
    runner = [] {
      if (html_path.empty() && markdown_path.empty())
        fail(ErrorCategory::usage, "give --html FILE and/or --md FILE: where to write the report");
      options.generator = "ipj 0.1.0";
      const std::vector<report::Section> sections = report::load_sections(inputs);
      if (!html_path.empty()) write_file_atomically(html_path, report::render_html_report(sections, options));
      if (!markdown_path.empty())
        write_file_atomically(markdown_path, report::render_markdown_report(sections, options));
      const int charts = report::count_charts(sections);
      if (flags.json) {
        Json listed = Json::array();
        for (const auto& section : sections)
          listed.push_back({{"path", section.path},
                            {"kind", section.kind},
                            {"title", section.title},
                            {"charts", section.charts.size()},
                            {"notes", section.notes}});
        print_json({{"schema_version", kResultsSchemaVersion},
                    {"kind", "report"},
                    {"html", html_path.empty() ? Json(nullptr) : Json(html_path)},
                    {"markdown", markdown_path.empty() ? Json(nullptr) : Json(markdown_path)},
                    {"charts", charts},
                    {"inputs", listed}});
      } else {
        for (const auto& section : sections)
          std::cout << section.kind << ": " << section.title << " (" << section.path << ")\n";
        if (!html_path.empty()) std::cout << "wrote " << html_path << " (" << charts << " charts)\n";
        if (!markdown_path.empty()) std::cout << "wrote " << markdown_path << "\n";
      }
      return 0;
    };
  });
  return command;
}

CLI::App* register_gate_command(CLI::App& app, CommandRunner& runner) {
  auto* command = app.add_subcommand(
      "gate",
      "Compare current results with a baseline (throughput, latency, joules per sample/inference, accuracy;\n"
      "noise-aware); exit 0 when nothing regressed, 1 when something did, 2 on bad input\n"
      "Example: ipj gate --baseline bench/baselines/ci.json --current bench.json --max-regression 5% "
      "--metric p99_ms:30% --metric test_acc:0.5pt");
  static CommonOutputFlags flags;
  static std::string baseline_path, current_path, max_regression = "5%";
  static std::vector<std::string> metric_texts;
  add_output_flags(*command, flags);
  command->add_option("--baseline", baseline_path, "Baseline results file")->required();
  command->add_option("--current", current_path, "Current results file")->required();
  command
      ->add_option("--max-regression", max_regression, "Default threshold: 5% (relative) or 0.5pt (accuracy)")
      ->capture_default_str();
  command->add_option(
      "--metric", metric_texts,
      "NAME:THRESHOLD for a metric key (fp32.b64.p99_ms), its last part (p99_ms) or a category "
      "(accuracy|throughput|latency|energy|time|size|errors); THRESHOLD 10%, 0.5pt or off");
  command->callback([&runner] {
    runner = [] {
      report::GateOptions options;
      options.max_regression = report::parse_threshold(max_regression, "--max-regression");
      for (const std::string& text : metric_texts)
        options.metrics.push_back(report::parse_metric_threshold(text));
      report::GateResult result;
      try {
        const report::Section baseline = report::build_section(report::load_results_file(baseline_path));
        const report::Section current = report::build_section(report::load_results_file(current_path));
        result = report::compare_sections(baseline, current, options);
      } catch (const Error& error) {
        // The gate's contract: every bad input exits 2 (1 means "regressed").
        fail(ErrorCategory::usage, error.what());
      }
      if (flags.json) {
        print_json(report::to_json(result, options));
      } else {
        std::cout << "gate: " << result.kind << " results, " << result.current_path << " vs baseline "
                  << result.baseline_path << " (default threshold "
                  << report::describe(options.max_regression) << ")\n"
                  << report::render_gate_table(result);
      }
      return result.regressed ? 1 : 0;
    };
  });
  return command;
}

}  // namespace ipj::cli
