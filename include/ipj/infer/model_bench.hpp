// `ipj bench` as one library call: every variant of one model file x every batch size through the latency
// bench, each variant under its thread plan, with its test accuracy (data: the given folder, else the one the
// model was trained on, else Fashion-MNIST) and the energy of exactly the reported windows. The CLI only
// parses flags, calls run_model_bench and prints the report.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ipj/core/json_io.hpp"
#include "ipj/device/threading.hpp"
#include "ipj/infer/inference_model.hpp"
#include "ipj/infer/latency_bench.hpp"

namespace ipj::infer {

struct ModelBenchOptions {
  std::string model_path;             // checkpoint / run folder, int8/program/graph file or TorchScript file
  std::vector<Variant> variants;      // in the order benched (parse_variant at the CLI)
  std::vector<std::int64_t> batches;  // batch sizes, in the order benched for each variant
  // How each variant is loaded (its `variant` is set per variant). load.calibration_data and
  // load.calibration_data_options are also the data of the accuracy pass.
  LoadOptions load;
  BenchOptions bench;
  int threads = 0;  // cores for the thread plans (0 = all online cores)
  device::ThreadPlanChoice thread_plan = device::ThreadPlanChoice::tuned;  // --thread-plan
  bool measure_accuracy = true;  // the test-set accuracy of each variant
  std::int64_t test_limit = 0;   // accuracy on the first N test samples (0 = all)
  bool measure_energy = true;
  double cpu_tdp_w = 0.0;        // energy estimate's CPU power at full load (0 = $IPJ_CPU_TDP_W or default)
  int energy_interval_ms = 100;  // meter sampling period
  bool show_progress = false;    // one log line per loaded variant and per row (stderr)
};

// One benched variant as loaded.
struct BenchedVariant {
  std::string variant, format, path, model_name;
  std::int64_t parameter_bytes = 0;
  std::optional<double> test_acc;                    // empty without the accuracy pass
  std::optional<Fp32EngineChoice> fp32_engine;       // fp32 variants: eager or frozen, and why
  std::optional<Batch1Threads> batch1_threads;       // measured at load (fp32 auto engine, int8 variants)
  std::optional<Int8BatchEngine> int8_batch_engine;  // static / QAT int8: XNNPACK or LibTorch for batches
};

// A variant (batch 0: all its batches) or one batch of it that could not be benched, and why.
struct SkippedRow {
  std::string variant;
  std::int64_t batch = 0;
  std::string reason;
};

struct ModelBenchReport {
  std::string model_path;
  double window_s = 0.0;
  std::vector<BenchedVariant> variants;
  std::vector<BenchRow> rows;         // variant-major: variants x batches
  std::vector<SkippedRow> skipped;    // variants/batches that failed: the other rows are kept
  std::vector<std::string> warnings;  // e.g. --data of another class or channel count than the model's
  // The accuracy pass's data set (data::to_json, test images only: no training counts or statistics); null
  // without the accuracy pass.
  Json dataset;
  Json environment;       // device::device_report()
  Json threads;           // the last variant's thread plan (device::to_json)
  std::string allocator;  // what the bench set in glibc's malloc (device::AllocatorPlan::reason)
  Json machine_load;      // {before, during, busy} (device::machine_load_json)
};

// The results object of `ipj bench --json` (schema_version, kind "bench"; docs/RESULTS.md).
Json to_json(const ModelBenchReport& report);

// Throws ipj::Error(usage) for empty variant or batch lists or an unknown variant name, and what
// data::load_dataset throws. A variant that cannot be loaded or run here (load_inference_model's unsupported,
// usage or invalid_input errors, LibTorch errors of its forward pass) or a batch size that fails is skipped
// with its reason and the others are benched; when nothing could be measured the first failure is thrown.
// io errors (the model file is unreadable) are thrown at once. Each variant runs under its thread plan
// (inference_thread_workload), restored when the variant is done.
ModelBenchReport run_model_bench(const ModelBenchOptions& options);

// The pool that runs `model`'s kernels: fp32 GEMMs (OpenBLAS) for the fp32 variant of a built-in model
// without convolutions (mlp), oneDNN for everything else (convolutions, bf16, int8, TorchScript graphs).
device::ThreadWorkload inference_thread_workload(const InferenceModel& model);

}  // namespace ipj::infer
