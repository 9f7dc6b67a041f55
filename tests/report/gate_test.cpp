// ipj gate's comparison logic on synthetic sections: direction-aware thresholds, points for accuracy, noise
// from spreads, MLPerf energy rules; plus the chart helpers (ticks, Pareto frontier, escaping).
#include <gtest/gtest.h>

#include "ipj/core/error.hpp"
#include "ipj/report/gate.hpp"
#include "ipj/report/svg_chart.hpp"

namespace ipj::report {
namespace {

Metric metric(const std::string& key, double value, Direction direction, MetricCategory category,
              const std::string& unit = "") {
  Metric result;
  result.key = key;
  result.label = key;
  result.unit = unit;
  result.value = value;
  result.direction = direction;
  result.category = category;
  return result;
}

EnergyProvenance energy(const std::string& source, double samples, double hz,
                        const std::string& model = "m") {
  EnergyProvenance provenance;
  provenance.source = source;
  provenance.model = source == "estimated" ? model : "";
  provenance.samples = samples;
  provenance.sample_hz = hz;
  provenance.window_s = samples / hz;
  return provenance;
}

// A bench-like section: throughput, p99 latency, J/1000 (estimated, 90 samples at 100 Hz), accuracy.
Section bench_section(double slowdown) {
  Section section;
  section.kind = "bench";
  section.path = "synthetic.json";
  section.metrics.push_back(metric("fp32.b64.throughput_per_s", 40000.0 / slowdown,
                                   Direction::higher_is_better, MetricCategory::throughput, "inferences/s"));
  section.metrics.push_back(
      metric("fp32.b64.p99_ms", 1.5 * slowdown, Direction::lower_is_better, MetricCategory::latency, "ms"));
  Metric joules =
      metric("fp32.b64.j_per_1000", 0.5 * slowdown, Direction::lower_is_better, MetricCategory::energy, "J");
  joules.energy = energy("estimated", 90, 100);
  section.metrics.push_back(joules);
  section.metrics.push_back(
      metric("fp32.test_acc", 0.88, Direction::higher_is_better, MetricCategory::accuracy));
  return section;
}

const GateRow& row_of(const GateResult& result, const std::string& key) {
  for (const GateRow& row : result.rows)
    if (row.key == key) return row;
  throw std::runtime_error("no row " + key);
}

TEST(Gate, IdenticalInputsPass) {
  const GateResult result = compare_sections(bench_section(1.0), bench_section(1.0), GateOptions{});
  EXPECT_FALSE(result.regressed);
  for (const GateRow& row : result.rows)
    EXPECT_EQ(row.status, GateStatus::ok) << row.key;
}

TEST(Gate, TenPercentSlowdownFailsAtFivePercentOnEveryDirection) {
  const GateResult result = compare_sections(bench_section(1.0), bench_section(1.1), GateOptions{});
  EXPECT_TRUE(result.regressed);
  EXPECT_EQ(row_of(result, "fp32.b64.throughput_per_s").status, GateStatus::regressed);  // lower: worse
  EXPECT_EQ(row_of(result, "fp32.b64.p99_ms").status, GateStatus::regressed);            // higher: worse
  EXPECT_EQ(row_of(result, "fp32.b64.j_per_1000").status, GateStatus::regressed);
  EXPECT_EQ(row_of(result, "fp32.test_acc").status, GateStatus::ok);
  EXPECT_NEAR(*row_of(result, "fp32.b64.p99_ms").change, 0.10, 1e-9);
}

TEST(Gate, SpeedUpIsAnImprovementNotARegression) {
  const GateResult result = compare_sections(bench_section(1.0), bench_section(0.8), GateOptions{});
  EXPECT_FALSE(result.regressed);
  EXPECT_EQ(row_of(result, "fp32.b64.throughput_per_s").status, GateStatus::improved);
  EXPECT_EQ(row_of(result, "fp32.b64.p99_ms").status, GateStatus::improved);
}

TEST(Gate, PerMetricThresholdsMostSpecificWins) {
  GateOptions options;
  options.max_regression = parse_threshold("5%", "--max-regression");
  options.metrics.push_back(parse_metric_threshold("latency:50%"));
  options.metrics.push_back(parse_metric_threshold("throughput_per_s:20%"));
  options.metrics.push_back(parse_metric_threshold("fp32.b64.j_per_1000:off"));
  const GateResult result = compare_sections(bench_section(1.0), bench_section(1.1), options);
  EXPECT_FALSE(result.regressed);
  EXPECT_EQ(row_of(result, "fp32.b64.p99_ms").threshold_from, "--metric latency");
  EXPECT_EQ(row_of(result, "fp32.b64.throughput_per_s").threshold_from, "--metric throughput_per_s");
  EXPECT_EQ(row_of(result, "fp32.b64.j_per_1000").status, GateStatus::ignored);
  options.metrics.push_back(parse_metric_threshold("fp32.b64.throughput_per_s:5%"));  // exact key beats field
  EXPECT_TRUE(compare_sections(bench_section(1.0), bench_section(1.1), options).regressed);
}

TEST(Gate, AccuracyInPoints) {
  Section base = bench_section(1.0), current = bench_section(1.0);
  current.metrics.back().value = 0.874;  // -0.6 pt, -0.68% relative
  GateOptions options;
  EXPECT_FALSE(compare_sections(base, current, options).regressed);
  options.metrics.push_back(parse_metric_threshold("accuracy:0.5pt"));
  const GateResult result = compare_sections(base, current, options);
  EXPECT_TRUE(result.regressed);
  EXPECT_EQ(row_of(result, "fp32.test_acc").status, GateStatus::regressed);
  options.metrics.back() = parse_metric_threshold("test_acc:1pt");
  EXPECT_FALSE(compare_sections(base, current, options).regressed);
  // Points make no sense for a throughput.
  options.metrics.back() = parse_metric_threshold("throughput:1pt");
  EXPECT_THROW(compare_sections(base, current, options), Error);
}

TEST(Gate, DifferencesInsideTheSpreadOfRepeatsAreNoise) {
  Section base = bench_section(1.0), current = bench_section(1.1);
  // Windows of +-8% on each side: a 9% throughput drop is within noise, a 30% one is not.
  base.metrics[0].spread = Spread{40000 * 0.92, 40000 * 1.08, 3};
  current.metrics[0].spread = Spread{current.metrics[0].value * 0.92, current.metrics[0].value * 1.08, 3};
  GateResult result = compare_sections(base, current, GateOptions{});
  EXPECT_EQ(row_of(result, "fp32.b64.throughput_per_s").status, GateStatus::within_noise);
  EXPECT_NE(row_of(result, "fp32.b64.throughput_per_s").note.find("spread"), std::string::npos);
  current = bench_section(1.0 / 0.7);
  current.metrics[0].spread = Spread{current.metrics[0].value * 0.92, current.metrics[0].value * 1.08, 3};
  result = compare_sections(base, current, GateOptions{});
  EXPECT_EQ(row_of(result, "fp32.b64.throughput_per_s").status, GateStatus::regressed);
}

TEST(Gate, EnergyFollowsMlperfPowerRules) {
  Section base = bench_section(1.0), current = bench_section(2.0);
  // Estimates are never compared with counters.
  current.metrics[2].energy = energy("counter", 90, 100);
  GateResult result = compare_sections(base, current, GateOptions{});
  EXPECT_EQ(row_of(result, "fp32.b64.j_per_1000").status, GateStatus::not_comparable);
  EXPECT_NE(row_of(result, "fp32.b64.j_per_1000").note.find("estimated vs counter"), std::string::npos);
  // Two estimates under different models are not comparable either.
  current.metrics[2].energy = energy("estimated", 90, 100, "other TDP");
  EXPECT_EQ(row_of(compare_sections(base, current, GateOptions{}), "fp32.b64.j_per_1000").status,
            GateStatus::not_comparable);
  // A window of 59 samples, or 60 at 0.5 Hz, is too short.
  current.metrics[2].energy = energy("estimated", 59, 100);
  result = compare_sections(base, current, GateOptions{});
  EXPECT_EQ(row_of(result, "fp32.b64.j_per_1000").status, GateStatus::not_comparable);
  EXPECT_NE(row_of(result, "fp32.b64.j_per_1000").note.find("59 samples"), std::string::npos);
  current.metrics[2].energy = energy("estimated", 60, 0.5);
  EXPECT_EQ(row_of(compare_sections(base, current, GateOptions{}), "fp32.b64.j_per_1000").status,
            GateStatus::not_comparable);
  // 60 samples at 1 Hz, same source and model: gated (and 2x the energy regresses).
  current.metrics[2].energy = energy("estimated", 60, 1.0);
  EXPECT_EQ(row_of(compare_sections(base, current, GateOptions{}), "fp32.b64.j_per_1000").status,
            GateStatus::regressed);
}

TEST(Gate, MissingMetricsFailAndNewOnesAreListed) {
  Section base = bench_section(1.0), current = bench_section(1.0);
  current.metrics.erase(current.metrics.begin());
  current.metrics.push_back(
      metric("fp32.b1.p99_ms", 0.3, Direction::lower_is_better, MetricCategory::latency));
  const GateResult result = compare_sections(base, current, GateOptions{});
  EXPECT_TRUE(result.regressed);
  EXPECT_EQ(row_of(result, "fp32.b64.throughput_per_s").status, GateStatus::missing);
  EXPECT_EQ(row_of(result, "fp32.b1.p99_ms").status, GateStatus::added);
}

TEST(Gate, BadThresholdsAndMismatchedKindsAreUsageErrors) {
  for (const char* text : {"5", "abc%", "-5%", "pt", "5 %", "nan%"}) {
    try {
      parse_threshold(text, "--max-regression");
      ADD_FAILURE() << text;
    } catch (const Error& error) {
      EXPECT_EQ(error.category(), ErrorCategory::usage) << text;
      EXPECT_NE(std::string(error.what()).find("--max-regression"), std::string::npos);
    }
  }
  EXPECT_THROW(parse_metric_threshold("p99_ms"), Error);
  EXPECT_THROW(parse_metric_threshold(":5%"), Error);
  Section other = bench_section(1.0);
  other.kind = "load";
  EXPECT_THROW(compare_sections(bench_section(1.0), other, GateOptions{}), Error);
  GateOptions options;
  options.metrics.push_back(parse_metric_threshold("no_such_metric:5%"));
  EXPECT_THROW(compare_sections(bench_section(1.0), bench_section(1.0), options), Error);
}

TEST(Charts, NiceTicksAndParetoFrontier) {
  const std::vector<double> expected{0, 0.2, 0.4, 0.6, 0.8, 1.0};
  const std::vector<double> fifths = nice_ticks(0, 1, 5);
  ASSERT_EQ(fifths.size(), expected.size());
  for (std::size_t index = 0; index < expected.size(); ++index)
    EXPECT_NEAR(fifths[index], expected[index], 1e-12);
  const auto ticks = nice_ticks(0.94, 4.06, 6, true);
  EXPECT_EQ(ticks.front(), 0.0);
  for (std::size_t index = 1; index < ticks.size(); ++index)
    EXPECT_EQ(ticks[index] - ticks[index - 1], 1.0);
  // (joules, accuracy): (2, 0.80) is beaten by (1, 0.85); (3, 0.90) is on the frontier.
  const auto frontier = pareto_frontier({{2, 0.80}, {1, 0.85}, {3, 0.90}, {4, 0.89}, {1, 0.70}});
  EXPECT_EQ(frontier, (std::vector<std::pair<double, double>>{{1, 0.85}, {3, 0.90}}));
}

TEST(Charts, SvgHasAxesUnitsPointsAndEscapesText) {
  Chart chart;
  chart.title = "Latency <b>";
  chart.x.label = "batch size";
  chart.x.scale = AxisScale::log2;
  chart.y.label = "latency";
  chart.y.unit = "ms";
  chart.series.push_back({"<script>alert(1)</script>", {{1, 0.2}, {64, 1.1}, {256, 3.5}}, {}, false, 0});
  chart.series.push_back({"p99 \"quoted\"", {{1, 0.3}, {64, 1.5}, {256, 4.0}}, {}, true, 0});
  const std::string svg = render_svg_chart(chart, "c1");
  EXPECT_EQ(svg.rfind("<svg class=\"chart chart-line\"", 0), 0u);
  EXPECT_NE(svg.find("viewBox=\"0 0 560 340\""), std::string::npos);
  EXPECT_NE(svg.find("class=\"axis axis-x\""), std::string::npos);
  EXPECT_NE(svg.find("class=\"axis axis-y\""), std::string::npos);
  EXPECT_NE(svg.find("latency (ms)"), std::string::npos);
  EXPECT_NE(svg.find("batch size, log scale"), std::string::npos);
  EXPECT_NE(svg.find(">256<"), std::string::npos);  // log axis ticks at the batch sizes
  std::size_t points = 0;
  for (std::size_t at = svg.find("class=\"point\""); at != std::string::npos;
       at = svg.find("class=\"point\"", at + 1))
    ++points;
  EXPECT_EQ(points, 6u);
  EXPECT_EQ(svg.find("<script"), std::string::npos);
  EXPECT_EQ(svg.find("<b>"), std::string::npos);
  EXPECT_NE(svg.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(svg.find("p99 &quot;quoted&quot;"), std::string::npos);
}

}  // namespace
}  // namespace ipj::report
