// `ipj bench`: latency, throughput, joules per 1000 inferences and accuracy of model variants x batch sizes.
#include <iostream>

#include "choice_flags.hpp"
#include "cli_support.hpp"
#include "ipj/core/text_table.hpp"
#include "ipj/infer/model_bench.hpp"

namespace ipj::cli {

CLI::App* register_bench_command(CLI::App& app, CommandRunner& runner) {
  auto* command = app.add_subcommand(
      "bench",
      "Measure latency (p50/p90/p99), throughput, joules per 1000 inferences and test accuracy of model\n"
      "variants at several batch sizes (warm-up, then windows until 3 agree within 10%)\n"
      "Example: ipj bench --model runs/mlp --variants fp32,jit,int8-dynamic,int8-static --batch 1,64,256");
  static CommonOutputFlags flags;
  static std::string model_path, variants_text = "file", batches_text = "1,64";
  static ModelInputFlags input_flags;
  static std::string data_dir;
  static infer::BenchOptions bench;
  static infer::LoadOptions load;
  static int threads = 0;
  static bool no_accuracy = false, no_energy = false;
  static std::int64_t test_limit = 0;
  static double tdp = 0.0;
  static int energy_interval_ms = 100;
  static DataFlags data_flags;
  add_output_flags(*command, flags);
  command
      ->add_option("--model", model_path,
                   "ipj checkpoint / run folder, ipj int8/program/graph file, or TorchScript file")
      ->required();
  command
      ->add_option("--variants", variants_text,
                   "Comma list: file (as stored) | fp32 | bf16 | jit | int8-dynamic | int8-static\n"
                   "(int8 of TorchScript files: imported into ipj's graph; needs --input-shape)")
      ->capture_default_str();
  command->add_option("--batch", batches_text, "Comma list of batch sizes")->capture_default_str();
  add_model_input_flags(*command, input_flags);
  command->add_option("--window-s", bench.window_s, "Measurement window length")
      ->check(finite_range(0.001, 3600.0))
      ->capture_default_str();
  command->add_option("--warmup-s", bench.warmup_s, "Warm-up time per row")
      ->check(finite_range(0.0, 3600.0))
      ->capture_default_str();
  command->add_option("--max-windows", bench.max_windows, "Give up on stability after this many windows")
      ->check(positive_integer(10000))
      ->capture_default_str();
  command->add_option("--threads", threads, "Cores to use (0 = all)")->check(non_negative_integer(4096));
  static device::ThreadPlanChoice thread_plan = device::ThreadPlanChoice::tuned;
  add_choice_option(*command, "--thread-plan", thread_plan,
                    "tuned (per model, fewer threads on a busy machine) | python (Python torch's default)");
  command->add_option("--data", data_dir,
                      "Data set for accuracy and int8-static calibration (default: the model's)");
  command->add_option("--test-limit", test_limit, "Accuracy on the first N test samples only (0 = all)")
      ->check(non_negative_integer(kMaxSamples));
  add_data_flags(*command, data_flags, false);
  command->add_option("--calib", load.calibration_samples, "Calibration samples for int8-static")
      ->check(positive_integer(kMaxSamples))
      ->capture_default_str();
  command->add_option("--engine", load.engine, "Quantized engine for int8 variants")->capture_default_str();
  command->add_flag("--no-accuracy", no_accuracy, "Skip the test-set accuracy of each variant");
  command->add_flag("--no-energy", no_energy, "Do not measure energy");
  command->add_option("--cpu-tdp-w", tdp, "CPU power at full load for the energy estimate")
      ->check(finite_range(0.0, 1e5));
  command
      ->add_option("--energy-interval-ms", energy_interval_ms,
                   "Energy sampling period (ipj gate compares energy over >= 60 samples: e.g. 20 ms with "
                   "0.5 s windows)")
      ->check(positive_integer(10000))
      ->capture_default_str();
  command->callback([&runner] {
    runner = [] {
      infer::ModelBenchOptions options;
      options.model_path = model_path;
      parse_model_input_flags(input_flags, load.input_shape, load.mean, load.std);
      load.calibration_data = data_dir;
      load.calibration_data_options = data_options(data_flags);
      options.load = load;
      options.bench = bench;
      options.batches = parse_integer_list(batches_text, "--batch", 1, kMaxBatch);
      options.variants = split_commas(variants_text);
      options.threads = threads;
      options.thread_plan = thread_plan;
      options.measure_accuracy = !no_accuracy;
      options.test_limit = test_limit;
      options.measure_energy = !no_energy;
      options.cpu_tdp_w = tdp;
      options.energy_interval_ms = energy_interval_ms;
      options.show_progress = !flags.quiet && !flags.json;
      const infer::ModelBenchReport report = infer::run_model_bench(options);
      for (const std::string& warning : report.warnings)
        std::cerr << "ipj: warning: " << warning << "\n";
      for (const infer::SkippedRow& skipped : report.skipped)  // the measured rows are kept
        std::cerr << "ipj: warning: skipped variant " << skipped.variant
                  << (skipped.batch > 0 ? " at batch " + std::to_string(skipped.batch) : std::string())
                  << ": " << skipped.reason << "\n";
      if (flags.json) {
        print_json(infer::to_json(report));
        return 0;
      }
      TextTable table({"variant", "batch", "p50 ms", "p90 ms", "p99 ms", "inferences/s", "J/1000", "source",
                       "test acc", "weights", "stable"});
      for (const auto& row : report.rows) {
        table.add_row({row.variant, std::to_string(row.batch), format_number("%.3f", row.p50_ms),
                       format_number("%.3f", row.p90_ms), format_number("%.3f", row.p99_ms),
                       format_number("%.0f", row.throughput_per_s),
                       row.energy_source == "none" ? "-" : format_number("%.3f", row.j_per_1000),
                       row.energy_source, row.test_acc ? format_number("%.4f", *row.test_acc) : "-",
                       format_number("%.0f KiB", row.parameter_bytes / 1024.0), row.stable ? "yes" : "no"});
      }
      std::cout << table.render();
      for (const infer::SkippedRow& skipped : report.skipped)
        std::cout << "skipped: " << skipped.variant
                  << (skipped.batch > 0 ? " batch " + std::to_string(skipped.batch) : std::string()) << " ("
                  << skipped.reason << ")\n";
      return 0;
    };
  });
  return command;
}

}  // namespace ipj::cli
