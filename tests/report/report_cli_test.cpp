// `ipj report` and `ipj gate` as a user runs them, on results files made by short real ipj runs (train,
// repeat, compare, bench, quantize, measure) and on fixtures (load, prune, distill, malformed files; see
// fixtures/README.md). The HTML is rendered in headless Chromium: a screenshot that is not blank (decoded
// with libpng) and the expected elements in the DOM.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <png.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "ipj/core/atomic_file.hpp"
#include "support/test_support.hpp"

namespace ipj {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const std::string kFixtures = testing::test_source_dir() + "/report/fixtures/";

using testing::ipj;

// Runs ipj; its stdout goes to `output` when given (run_process captures stdout itself: no shell redirect).
void run_or_fail(const std::string& arguments, const std::string& output = "") {
  const auto result = ipj(arguments);
  if (result.exit_code != 0)
    throw std::runtime_error("ipj " + arguments + " failed (" + std::to_string(result.exit_code) +
                             "): " + result.err);
  if (!output.empty()) write_file_atomically(output, result.out);
}

// Results of short real runs, made once per build of ipj (shared by the tests of this binary, which CTest
// runs as separate processes: a file lock makes the first one do the work).
const std::string& generated() {
  static const std::string folder = [] {
    const std::string dir = IPJ_REPORT_RESULTS_DIR;
    fs::create_directories(dir);
    const int lock = ::open((dir + "/.lock").c_str(), O_CREAT | O_RDWR, 0644);
    if (lock < 0 || ::flock(lock, LOCK_EX) != 0) throw std::runtime_error("cannot lock " + dir);
    const fs::path stamp = fs::path(dir) / "stamp";
    std::error_code error;
    if (!fs::exists(stamp) || fs::last_write_time(stamp) < fs::last_write_time(testing::ipj_binary())) {
      fs::remove_all(dir + "/compare", error);
      fs::remove_all(dir + "/repeat", error);
      fs::remove_all(dir + "/train", error);
      const std::string common = " --model mlp --test-limit 500 --quiet --json";
      run_or_fail("train" + common + " --epochs 2 --limit 2000 --seed 1 --out " + dir + "/train");
      run_or_fail("compare" + common +
                  " --limit 3000 --max-epochs 2 --epochs 1 --target-acc 0.5 --report --out " + dir +
                  "/compare");
      run_or_fail("train" + common + " --epochs 1 --limit 1500 --repeat 2 --target-acc 0.5 --out " + dir +
                  "/repeat");
      run_or_fail("bench --model " + dir +
                      "/train --variants fp32 --batch 1,16 --window-s 0.3 --warmup-s 0.05 " +
                      "--max-windows 4 --energy-interval-ms 10 --test-limit 500 --quiet --json",
                  dir + "/bench.json");
      run_or_fail("quantize --model " + dir + "/train --mode dynamic --out " + dir +
                      "/int8.pt --max-drop 100 " + "--test-limit 500 --quiet --json",
                  dir + "/quantize.json");
      run_or_fail("measure --json -- sleep 0.1", dir + "/measure.json");
      write_file_atomically(stamp.string(), "done\n");
    }
    ::flock(lock, LOCK_UN);
    ::close(lock);
    return dir;
  }();
  return folder;
}

std::string path(const std::string& name) {
  return generated() + "/" + name;
}

// Every kind once: generated runs first, then fixtures.
std::vector<std::string> every_kind() {
  return {path("train/results.json"), path("compare/compare.json"), path("repeat/repeat.json"),
          path("bench.json"),         path("quantize.json"),        path("measure.json"),
          kFixtures + "load.json",    kFixtures + "prune.json",     kFixtures + "distill.json"};
}

std::string joined(const std::vector<std::string>& paths) {
  std::string text;
  for (const auto& item : paths)
    text += " '" + item + "'";
  return text;
}

std::size_t count(const std::string& text, const std::string& needle) {
  std::size_t found = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos;
       at = text.find(needle, at + needle.size()))
    ++found;
  return found;
}

std::string fixed4(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.4f", value);
  return buffer;
}

struct Chromium {
  testing::TempDir profile;
  testing::ProcessResult run(const std::string& arguments) const {
    return testing::run_process(
        "timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-background-networking "
        "--disable-component-update --disable-sync --no-first-run --hide-scrollbars --user-data-dir=" +
        profile.path() + " " + arguments);
  }
};

struct Pixels {
  std::size_t width = 0, height = 0;
  std::vector<std::uint8_t> rgb;
};

Pixels read_png(const std::string& file) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&image, file.c_str())) throw std::runtime_error("not a PNG: " + file);
  image.format = PNG_FORMAT_RGB;
  Pixels pixels;
  pixels.width = image.width;
  pixels.height = image.height;
  pixels.rgb.resize(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, pixels.rgb.data(), 0, nullptr))
    throw std::runtime_error("cannot decode " + file);
  return pixels;
}

// A rendered report: many distinct colours (text, chart palette, badges) and a fair share of ink.
void expect_not_blank(const std::string& file, std::size_t width) {
  const Pixels pixels = read_png(file);
  EXPECT_EQ(pixels.width, width);
  std::set<std::uint32_t> colors;
  std::size_t ink = 0;
  for (std::size_t at = 0; at + 2 < pixels.rgb.size(); at += 3) {
    const std::uint32_t color = pixels.rgb[at] << 16 | pixels.rgb[at + 1] << 8 | pixels.rgb[at + 2];
    colors.insert(color);
    ink += color != 0xffffff;
  }
  const double ink_share = static_cast<double>(ink) / (pixels.width * pixels.height);
  EXPECT_GT(colors.size(), 200u) << file;
  EXPECT_GT(ink_share, 0.03) << file;
  EXPECT_LT(ink_share, 0.9) << file;
}

}  // namespace

TEST(ReportCli, ContractTwoFilesGiveAChartPerKind) {
  testing::TempDir dir;
  const auto result = ipj("report " + path("train/results.json") + " " + path("bench.json") + " --html " +
                          dir.file("out.html"));
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const std::string html = read_file(dir.file("out.html"));
  const std::size_t train = html.find("id=\"result-1\""), bench = html.find("id=\"result-2\"");
  ASSERT_NE(train, std::string::npos);
  ASSERT_NE(bench, std::string::npos);
  EXPECT_NE(html.substr(train, bench - train).find("<svg"), std::string::npos);
  EXPECT_NE(html.substr(bench).find("<svg"), std::string::npos);
}

TEST(ReportCli, EveryKindSelfContainedWithValuesFromTheFiles) {
  testing::TempDir dir;
  const auto result = ipj("report" + joined(every_kind()) + " --html " + dir.file("r.html") + " --md " +
                          dir.file("r.md") + " --json");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  const json summary = json::parse(result.out);
  EXPECT_EQ(summary["kind"], "report");
  ASSERT_EQ(summary["inputs"].size(), every_kind().size());
  std::set<std::string> kinds;
  for (const auto& input : summary["inputs"]) {
    kinds.insert(input["kind"].get<std::string>());
    EXPECT_GE(input["charts"].get<int>(), 1) << input;
  }
  EXPECT_EQ(kinds, (std::set<std::string>{"train", "compare", "train-repeat", "bench", "quantize", "measure",
                                          "load", "prune", "distill"}));
  const std::string html = read_file(dir.file("r.html"));
  // One <svg> at least per file, plus the accuracy-vs-energy charts.
  for (std::size_t index = 1; index <= every_kind().size(); ++index) {
    const std::size_t begin = html.find("id=\"result-" + std::to_string(index) + "\"");
    ASSERT_NE(begin, std::string::npos) << index;
    const std::size_t end = html.find("</section>", begin);
    EXPECT_NE(html.substr(begin, end - begin).find("<svg"), std::string::npos) << "file #" << index;
  }
  EXPECT_EQ(count(html, "<svg"), summary["charts"].get<std::size_t>());
  // Self-contained: no scripts, no external references (the SVG namespace is a name, not a fetch).
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(std::regex_search(html, std::regex("(src|href)=\"(https?:)?//")), false);
  EXPECT_NE(html.find("Content-Security-Policy"), std::string::npos);
  EXPECT_NE(html.find("@media print"), std::string::npos);
  // Values from the files, formatted as the tables show them.
  const json train = json::parse(read_file(path("train/results.json")));
  EXPECT_NE(html.find(fixed4(train["final"]["test_acc"].get<double>())), std::string::npos);
  const json bench = json::parse(read_file(path("bench.json")));
  char p50[32];
  std::snprintf(p50, sizeof p50, "%.3f", bench["rows"][0]["p50_ms"].get<double>());
  EXPECT_NE(html.find(std::string(">") + p50 + "<"), std::string::npos) << p50;
  EXPECT_NE(html.find("0.8964"), std::string::npos);  // prune fixture: pruned accuracy
  // Energy provenance: the estimate's model string is shown with its source.
  EXPECT_NE(html.find("estimate: cpu_seconds"), std::string::npos);
  EXPECT_NE(html.find("source-estimated"), std::string::npos);
  // The Markdown: tables, no images or markup, fits a pull-request comment.
  const std::string markdown = read_file(dir.file("r.md"));
  EXPECT_NE(markdown.find("| # | kind | result | accuracy | throughput | energy | source |"),
            std::string::npos);
  EXPECT_NE(markdown.find(fixed4(train["final"]["test_acc"].get<double>())), std::string::npos);
  EXPECT_EQ(markdown.find("<svg"), std::string::npos);
  EXPECT_LT(markdown.size(), 65536u);
}

TEST(ReportCli, ChromiumRendersChartsAxesPointsAndTables) {
  testing::TempDir dir;
  // A run more accurate and costlier than every generated one (same energy source): the accuracy-vs-joules
  // chart then has a frontier of at least two points whichever generated run is cheapest (a generated run may
  // dominate all the others). No checksum: an edited copy.
  json accurate = json::parse(read_file(path("train/results.json")));
  accurate["final"]["test_acc"] = 0.999;
  accurate["final"]["energy_j"] = 1e6;
  accurate["energy"]["energy_j"] = 1e6;
  accurate.erase("checksum");
  write_file_atomically(dir.file("accurate.json"), accurate.dump());
  ASSERT_EQ(
      ipj("report" + joined(every_kind()) + " " + dir.file("accurate.json") + " --html " + dir.file("r.html"))
          .exit_code,
      0);
  Chromium chromium;
  const auto dom = chromium.run("--dump-dom file://" + dir.file("r.html"));
  ASSERT_EQ(dom.exit_code, 0) << dom.err;
  const std::string& text = dom.out;
  // Parsed into SVG elements with axes, labels and data points.
  EXPECT_GE(count(text, "<svg class=\"chart"), every_kind().size());
  EXPECT_GE(count(text, "class=\"axis axis-x\""), every_kind().size());
  EXPECT_GE(count(text, "class=\"axis axis-y\""), every_kind().size());
  EXPECT_GE(count(text, "class=\"axis-label\""), 2 * every_kind().size());
  EXPECT_GE(count(text, "class=\"point\"") + count(text, "class=\"bar point\""), 40u);
  EXPECT_NE(text.find("class=\"frontier\""), std::string::npos);  // the Pareto frontier
  EXPECT_NE(text.find("batch size, log scale"), std::string::npos);
  EXPECT_NE(text.find("energy (J/1000 inferences)"), std::string::npos);
  // The summary table holds values from the files.
  const std::size_t summary = text.find("<table class=\"summary\">");
  ASSERT_NE(summary, std::string::npos);
  const std::string table = text.substr(summary, text.find("</table>", summary) - summary);
  const json train = json::parse(read_file(path("train/results.json")));
  EXPECT_NE(table.find(fixed4(train["final"]["test_acc"].get<double>())), std::string::npos);
  EXPECT_NE(table.find("samples/s"), std::string::npos);
  EXPECT_NE(table.find("inferences/s"), std::string::npos);
  EXPECT_EQ(text.find("<script"), std::string::npos);
}

TEST(ReportCli, ScreenshotsAreNotBlankWideAndNarrow) {
  testing::TempDir dir;
  ASSERT_EQ(ipj("report" + joined(every_kind()) + " --html " + dir.file("r.html")).exit_code, 0);
  Chromium chromium;
  for (const int width : {1280, 420}) {
    const std::string shot = dir.file("shot-" + std::to_string(width) + ".png");
    const auto result = chromium.run("--screenshot=" + shot + " --window-size=" + std::to_string(width) +
                                     ",2400 file://" + dir.file("r.html"));
    ASSERT_EQ(result.exit_code, 0) << result.err;
    expect_not_blank(shot, static_cast<std::size_t>(width));
  }
}

TEST(ReportCli, TextFromFilesCannotInjectMarkup) {
  testing::TempDir dir;
  json train = json::parse(read_file(path("train/results.json")));
  const std::string attack = "<script>alert(1)</script><img src=x onerror=alert(2)>";
  train["config"]["model"] = attack;
  train["dataset"]["name"] = "\"><svg onload=alert(3)>";
  std::ofstream(dir.file("evil.json")) << train.dump();
  json bench = json::parse(read_file(path("bench.json")));
  bench["rows"][0]["variant"] = "</title></svg><iframe src=//example.com>";
  std::ofstream(dir.file("evil-bench.json")) << bench.dump();
  ASSERT_EQ(ipj("report " + dir.file("evil.json") + " " + dir.file("evil-bench.json") + " --html " +
                dir.file("r.html") + " --md " + dir.file("r.md"))
                .exit_code,
            0);
  const std::string html = read_file(dir.file("r.html"));
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("<img"), std::string::npos);
  EXPECT_EQ(html.find("<iframe"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  Chromium chromium;
  const auto dom = chromium.run("--dump-dom file://" + dir.file("r.html"));
  ASSERT_EQ(dom.exit_code, 0);
  // In the parsed DOM, "<" only opens real elements (text is serialised as &lt;).
  for (const char* element : {"<script", "<img", "<iframe"})
    EXPECT_EQ(dom.out.find(element), std::string::npos) << element;
  EXPECT_FALSE(std::regex_search(dom.out, std::regex("<[^>]*\\son(error|load)=")));
  EXPECT_NE(dom.out.find("&lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  const std::string markdown = read_file(dir.file("r.md"));
  EXPECT_EQ(markdown.find("<script"), std::string::npos);
  EXPECT_EQ(markdown.find("<img"), std::string::npos);
}

TEST(ReportCli, CompareReportFlagWritesTheHtmlNextToCompareJson) {
  const std::string html = read_file(path("compare/report.html"));
  EXPECT_NE(html.find("<svg"), std::string::npos);
  // Baseline and optimized overlaid on the per-epoch charts (read from the run folders).
  EXPECT_NE(html.find("data-series=\"baseline test\""), std::string::npos);
  EXPECT_NE(html.find("data-series=\"optimized test\""), std::string::npos);
  EXPECT_NE(html.find("Accuracy per epoch"), std::string::npos);
}

TEST(ReportCli, MeasureJsonWithoutKindFromAnOlderIpj) {
  testing::TempDir dir;
  const auto result =
      ipj("report " + kFixtures + "measure-before-kind.json --md " + dir.file("r.md") + " --json");
  ASSERT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(json::parse(result.out)["inputs"][0]["kind"], "measure");
  EXPECT_NE(read_file(dir.file("r.md")).find("0.6201 J"), std::string::npos);
}

TEST(ReportCli, MalformedOrForeignFilesGetClearErrorsNamingTheFile) {
  struct Case {
    std::string file;
    int exit_code;
    std::string fragment;
  };
  const std::vector<Case> cases{
      {kFixtures + "not-json.json", 3, "is not JSON"},
      {kFixtures + "array.json", 3, "expected a JSON object"},
      {kFixtures + "foreign.json", 3, "no \"kind\""},
      {kFixtures + "unknown-kind.json", 3, "kind 'spaceship'"},
      {kFixtures + "future-schema.json", 3, "schema_version 99"},
      {kFixtures + "mistyped-bench.json", 3, "rows[0].p50_ms must be a number"},
      {kFixtures + "incomplete-train.json", 3, "final.test_acc is missing"},
      {kFixtures + "unknown-source-bench.json", 3,
       "rows[0].energy_source is 'rapl', not one of counter, integrated, estimated, none"},
      {kFixtures + "no-such-file.json", 4, "no-such-file.json"},
      {kFixtures, 4, "holds no results file"},
  };
  testing::TempDir dir;
  for (const Case& item : cases) {
    const auto result =
        ipj("report " + path("bench.json") + " '" + item.file + "' --html " + dir.file("r.html"));
    EXPECT_EQ(result.exit_code, item.exit_code) << item.file << ": " << result.err;
    EXPECT_NE(result.err.find(item.fragment), std::string::npos) << result.err;
    EXPECT_NE(result.err.find(fs::path(item.file).filename().string()), std::string::npos) << result.err;
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
    EXPECT_FALSE(fs::exists(dir.file("r.html")));  // nothing half-written
  }
  EXPECT_EQ(ipj("report " + path("bench.json")).exit_code, 2);  // neither --html nor --md
}

namespace {

// A copy of the generated bench results, `slowdown` times slower, with tight (+-1%) windows on both sides so
// that the comparison is not within noise.
void write_bench(const std::string& file, double slowdown) {
  json bench = json::parse(read_file(path("bench.json")));
  for (auto& row : bench["rows"]) {
    row["throughput_per_s"] = row["throughput_per_s"].get<double>() / slowdown;
    for (const char* key : {"p50_ms", "p90_ms", "p99_ms", "mean_ms"})
      row[key] = row[key].get<double>() * slowdown;
    row["j_per_1000"] = row["j_per_1000"].get<double>() * slowdown;
    json windows = json::array();
    for (const double wobble : {0.99, 1.0, 1.01})
      windows.push_back({{"throughput_per_s", row["throughput_per_s"].get<double>() * wobble},
                         {"p50_ms", row["p50_ms"].get<double>() / wobble},
                         {"p99_ms", row["p99_ms"].get<double>() / wobble},
                         {"j_per_1000", row["j_per_1000"].get<double>() / wobble}});
    row["window_stats"] = windows;
  }
  std::ofstream(file) << bench.dump();
}

}  // namespace

TEST(GateCli, PassesOnIdenticalInputsFailsOnATenPercentRegression) {
  testing::TempDir dir;
  write_bench(dir.file("base.json"), 1.0);
  write_bench(dir.file("same.json"), 1.0);
  write_bench(dir.file("slow.json"), 1.1);
  auto result = ipj("gate --baseline " + dir.file("base.json") + " --current " + dir.file("same.json"));
  EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
  EXPECT_NE(result.out.find("gate: passed"), std::string::npos) << result.out;
  result = ipj("gate --baseline " + dir.file("base.json") + " --current " + dir.file("slow.json") +
               " --max-regression 5%");
  EXPECT_EQ(result.exit_code, 1) << result.out << result.err;
  EXPECT_NE(result.out.find("REGRESSED"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("fp32.b16.throughput_per_s"), std::string::npos) << result.out;
  result = ipj("gate --baseline " + dir.file("base.json") + " --current " + dir.file("slow.json") +
               " --max-regression 15% --json");
  EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
  const json report = json::parse(result.out);
  EXPECT_EQ(report["kind"], "gate");
  EXPECT_FALSE(report["regressed"].get<bool>());
  bool energy_gated = false;
  for (const auto& metric : report["metrics"]) {
    EXPECT_NE(metric["status"], "regressed") << metric;
    // 3 windows x 0.3 s at 100 Hz: >= 60 samples of the same estimate model, so energy is compared.
    if (metric["category"] == "energy") energy_gated = energy_gated || metric["status"] == "ok";
  }
  EXPECT_TRUE(energy_gated) << result.out;
}

TEST(GateCli, RealRepeatsGiveNoiseAndSourcesAreNeverMixed) {
  testing::TempDir dir;
  // Train --repeat holds min..max of its seeds: the gate says when a difference is inside them.
  auto result =
      ipj("gate --baseline " + path("repeat/repeat.json") + " --current " + path("repeat/repeat.json"));
  EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
  json repeat = json::parse(read_file(path("repeat/repeat.json")));
  const double median = repeat["summary"]["samples_per_s"]["median"].get<double>();
  repeat["summary"]["samples_per_s"] = {
      {"median", median}, {"min", median * 0.85}, {"max", median * 1.15}, {"count", 2}};
  std::ofstream(dir.file("base-repeat.json")) << repeat.dump();
  repeat["summary"]["samples_per_s"] = {
      {"median", median * 0.9}, {"min", median * 0.8}, {"max", median * 1.1}, {"count", 2}};
  std::ofstream(dir.file("noisy-repeat.json")) << repeat.dump();
  result =
      ipj("gate --baseline " + dir.file("base-repeat.json") + " --current " + dir.file("noisy-repeat.json"));
  EXPECT_EQ(result.exit_code, 0) << result.out << result.err;  // -10%, but the seeds spread +-15%
  EXPECT_NE(result.out.find("within noise"), std::string::npos) << result.out;
  repeat["summary"]["samples_per_s"] = {
      {"median", median * 0.5}, {"min", median * 0.45}, {"max", median * 0.55}, {"count", 2}};
  std::ofstream(dir.file("slow-repeat.json")) << repeat.dump();
  result =
      ipj("gate --baseline " + dir.file("base-repeat.json") + " --current " + dir.file("slow-repeat.json"));
  EXPECT_EQ(result.exit_code, 1) << result.out << result.err;  // -50%: beyond the spread
  json bench = json::parse(read_file(path("bench.json")));
  for (auto& row : bench["rows"])
    row["energy_source"] = "counter";
  std::ofstream(dir.file("counter.json")) << bench.dump();
  result =
      ipj("gate --baseline " + path("bench.json") + " --current " + dir.file("counter.json") + " --json");
  EXPECT_EQ(result.exit_code, 0) << result.out << result.err;
  int not_comparable = 0;
  const json report = json::parse(result.out);
  for (const auto& metric : report["metrics"])
    if (metric["category"] == "energy") {
      EXPECT_EQ(metric["status"], "not comparable") << metric;
      EXPECT_NE(metric["note"].get<std::string>().find("estimated vs counter"), std::string::npos);
      ++not_comparable;
    }
  EXPECT_EQ(not_comparable, 2);
}

TEST(GateCli, BadInputExitsTwo) {
  testing::TempDir dir;
  const std::string bench = path("bench.json");
  for (const std::string& arguments :
       {"--baseline " + bench + " --current " + kFixtures + "no-such-file.json",
        "--baseline " + kFixtures + "not-json.json --current " + bench,
        "--baseline " + bench + " --current " + kFixtures + "foreign.json",
        "--baseline " + bench + " --current " + kFixtures + "load.json",  // different kinds
        "--baseline " + bench + " --current " + bench + " --max-regression 5",
        "--baseline " + bench + " --current " + bench + " --metric nonsense:5%",
        "--baseline " + bench + " --current " + bench + " --metric throughput:1pt", "--baseline " + bench}) {
    const auto result = ipj("gate " + arguments);
    EXPECT_EQ(result.exit_code, 2) << arguments << ": " << result.err;
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
  }
}

}  // namespace ipj
