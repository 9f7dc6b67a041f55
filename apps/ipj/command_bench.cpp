// `ipj bench`: latency, throughput, joules per 1000 inferences and accuracy of model variants x batch sizes.
// The CLI parses flags into infer::ModelBenchOptions and prints; infer::run_model_bench measures.
#include <iostream>
#include <utility>

#include "choice_flags.hpp"
#include "cli_support.hpp"
#include "ipj/core/text_table.hpp"
#include "ipj/infer/model_bench.hpp"

namespace ipj::cli {
namespace {

struct BenchFlags {
  CommonOutputFlags output;
  std::string model_path;
  std::string variants_text = "file";
  std::string batches_text = "1,64";
  ModelInputFlags input;
  std::string data_dir;
  infer::BenchOptions bench;
  infer::LoadOptions load;
  int threads = 0;
  device::ThreadPlanChoice thread_plan = device::ThreadPlanChoice::tuned;
  bool no_accuracy = false;
  bool no_energy = false;
  std::int64_t test_limit = 0;
  double tdp = 0.0;
  int energy_interval_ms = 100;
  DataFlags data;
};

// What to measure: the model, its variants, the batch sizes and the measurement windows.
void add_bench_model_flags(CLI::App& command, BenchFlags& flags) {
  command
      .add_option("--model", flags.model_path,
                  "ipj checkpoint / run folder, ipj int8/program/graph file, or TorchScript file")
      ->required();
  command
      .add_option("--variants", flags.variants_text,
                  "Comma list: file (as stored) | fp32 | bf16 | jit | int8-dynamic | int8-static\n"
                  "(int8 of TorchScript files: imported into ipj's graph; needs --input-shape)")
      ->capture_default_str();
  command.add_option("--batch", flags.batches_text, "Comma list of batch sizes")->capture_default_str();
  add_model_input_flags(command, flags.input);
  command.add_option("--window-s", flags.bench.window_s, "Measurement window length")
      ->check(finite_range(0.001, 3600.0))
      ->capture_default_str();
  command.add_option("--warmup-s", flags.bench.warmup_s, "Warm-up time per row")
      ->check(finite_range(0.0, 3600.0))
      ->capture_default_str();
  command
      .add_option("--max-windows", flags.bench.max_windows, "Give up on stability after this many windows")
      ->check(positive_integer(10000))
      ->capture_default_str();
  command.add_option("--threads", flags.threads, "Cores to use (0 = all)")->check(non_negative_integer(4096));
  add_choice_option(command, "--thread-plan", flags.thread_plan,
                    "tuned (per model, fewer threads on a busy machine) | python (Python torch's default)");
}

// Accuracy data, int8 calibration and energy.
void add_bench_data_flags(CLI::App& command, BenchFlags& flags) {
  command.add_option("--data", flags.data_dir,
                     "Data set for accuracy and int8-static calibration (default: the model's)");
  command.add_option("--test-limit", flags.test_limit, "Accuracy on the first N test samples only (0 = all)")
      ->check(non_negative_integer(kMaxSamples));
  add_data_flags(command, flags.data, false);
  command.add_option("--calib", flags.load.calibration.samples, "Calibration samples for int8-static")
      ->check(positive_integer(kMaxSamples))
      ->capture_default_str();
  command.add_option("--engine", flags.load.run.engine, "Quantized engine for int8 variants")
      ->capture_default_str();
  add_choice_option(
      command, "--fp32-engine", flags.load.run.fp32_engine,
      "How fp32 runs: auto (eager and frozen timed at load, the faster exact one; batch 1 and "
      "the largest --batch up to 64 on XNNPACK where faster) | eager | frozen (BN folded, oneDNN "
      "layouts, batch-1 linear as matrix-vector) | xnnpack (XNNPACK convolutions and linear "
      "layers, for every batch) | onednn (the frozen graph; the largest --batch up to 64 on oneDNN's "
      "runtime of ipj's graph, which auto also times)");
  add_choice_option(command, "--prefer", flags.load.run.prefer,
                    "What auto weighs where a faster form costs more CPU per answer: joules (batch 1 on "
                    "XNNPACK's pool only at <= 1.2x one thread's CPU) | latency (the fastest, whatever it "
                    "costs)");
  command.add_flag("--no-accuracy", flags.no_accuracy, "Skip the test-set accuracy of each variant");
  command.add_flag("--no-energy", flags.no_energy, "Do not measure energy");
  command.add_option("--cpu-tdp-w", flags.tdp, "CPU power at full load for the energy estimate")
      ->check(finite_range(0.0, 1e5));
  command
      .add_option("--energy-interval-ms", flags.energy_interval_ms,
                  "Energy sampling period (ipj gate compares energy over >= 60 samples: e.g. 20 ms with "
                  "0.5 s windows)")
      ->check(positive_integer(10000))
      ->capture_default_str();
}

infer::ModelBenchOptions bench_options(BenchFlags& flags) {
  infer::ModelBenchOptions options;
  options.model_path = flags.model_path;
  parse_model_input_flags(flags.input, flags.load.inputs.input_shape, flags.load.inputs.mean,
                          flags.load.inputs.std);
  flags.load.calibration.data = flags.data_dir;
  flags.load.calibration.data_options = data_options(flags.data);
  options.load = flags.load;
  options.bench = flags.bench;
  options.batches = parse_integer_list(flags.batches_text, "--batch", 1, kMaxBatch);
  for (const std::string& variant : split_commas(flags.variants_text))
    options.variants.push_back(infer::parse_variant(variant, "--variants"));
  options.threads = flags.threads;
  options.thread_plan = flags.thread_plan;
  options.measure_accuracy = !flags.no_accuracy;
  options.test_limit = flags.test_limit;
  options.measure_energy = !flags.no_energy;
  options.cpu_tdp_w = flags.tdp;
  options.energy_interval_ms = flags.energy_interval_ms;
  options.show_progress = !flags.output.quiet && !flags.output.json;
  return options;
}

// "XNNPACK 97%" / "oneDNN 100%": the row's calls a runtime answered (both where both did); "-" where none
// did.
std::string runtime_share(const infer::BenchRow& row) {
  std::string share;
  for (const auto& [name, calls] :
       {std::pair{"XNNPACK", row.xnnpack_calls}, std::pair{"oneDNN", row.onednn_calls}})
    if (calls > 0 && row.calls > 0)
      share += (share.empty() ? "" : ", ") + std::string(name) + " " +
               format_number("%.0f%%", 100.0 * static_cast<double>(calls) / static_cast<double>(row.calls));
  return share.empty() ? "-" : share;
}

void print_bench_table(const infer::ModelBenchReport& report) {
  TextTable table({"variant", "batch", "p50 ms", "p90 ms", "p99 ms", "CPU ms/call", "on runtime",
                   "inferences/s", "J/1000", "source", "test acc", "weights", "stable"});
  for (const auto& row : report.rows) {
    table.add_row({row.variant, std::to_string(row.batch), format_number("%.3f", row.p50_ms),
                   format_number("%.3f", row.p90_ms), format_number("%.3f", row.p99_ms),
                   format_number("%.3f", row.cpu_ms_per_call), runtime_share(row),
                   format_number("%.0f", row.throughput_per_s),
                   !row.energy_source ? "-" : format_number("%.3f", row.j_per_1000),
                   energy::reported_source_name(row.energy_source),
                   row.test_acc ? format_number("%.4f", *row.test_acc) : "-",
                   format_number("%.0f KiB", row.parameter_bytes / 1024.0), row.stable ? "yes" : "no"});
  }
  std::cout << table.render();
  for (const infer::BenchedVariant& variant : report.variants) {
    if (variant.fp32_engine)
      std::cout << variant.variant << " engine: " << choice_name(variant.fp32_engine->engine) << " ("
                << variant.fp32_engine->reason << ")\n";
    else if (variant.batch1_threads && !variant.batch1_threads->describe().empty())
      std::cout << variant.variant << ": " << variant.batch1_threads->describe() << "\n";
    if (variant.int8_batch_engine)
      std::cout << variant.variant << ": " << variant.int8_batch_engine->reason << "\n";
  }
  for (const infer::SkippedRow& skipped : report.skipped)
    std::cout << "skipped: " << skipped.variant
              << (skipped.batch > 0 ? " batch " + std::to_string(skipped.batch) : std::string()) << " ("
              << skipped.reason << ")\n";
}

int run_bench_command(BenchFlags& flags) {
  const infer::ModelBenchReport report = infer::run_model_bench(bench_options(flags));
  for (const std::string& warning : report.warnings)
    std::cerr << "ipj: warning: " << warning << "\n";
  for (const infer::SkippedRow& skipped : report.skipped)  // the measured rows are kept
    std::cerr << "ipj: warning: skipped variant " << skipped.variant
              << (skipped.batch > 0 ? " at batch " + std::to_string(skipped.batch) : std::string()) << ": "
              << skipped.reason << "\n";
  if (flags.output.json)
    print_json(infer::to_json(report));
  else
    print_bench_table(report);
  return 0;
}

}  // namespace

CLI::App* register_bench_command(CLI::App& app, CommandRunner& runner) {
  auto* command = app.add_subcommand(
      "bench",
      "Measure latency (p50/p90/p99), throughput, joules per 1000 inferences and test accuracy of model\n"
      "variants at several batch sizes (warm-up, then windows until 3 agree within 10%)\n"
      "Example: ipj bench --model runs/mlp --variants fp32,jit,int8-dynamic,int8-static --batch 1,64,256");
  static BenchFlags flags;
  add_output_flags(*command, flags.output);
  add_bench_model_flags(*command, flags);
  add_bench_data_flags(*command, flags);
  command->callback([&runner] { runner = [] { return run_bench_command(flags); }; });
  return command;
}

}  // namespace ipj::cli
