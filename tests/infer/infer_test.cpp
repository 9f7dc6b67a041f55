// Inference models and benchmarks: user TorchScript files made by python3-torch match PyTorch's outputs,
// ipj's variants agree with each other, bad files get clear errors, the bench loop's arithmetic, and the CLI
// contracts of `ipj quantize` and `ipj bench`.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <torch/script.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "inference_fixture.hpp"
#include "ipj/core/error.hpp"
#include "ipj/device/allocator.hpp"
#include "ipj/energy/meter.hpp"
#include "ipj/infer/inference_model.hpp"
#include "ipj/infer/latency_bench.hpp"
#include "ipj/infer/model_bench.hpp"
#include "ipj/infer/xnnpack_runtime.hpp"
#include "support/test_cache.hpp"
#include "support/test_support.hpp"

namespace ipj::infer {
namespace {

using json = nlohmann::json;

ErrorCategory category_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& error) {
    return error.category();
  }
  ADD_FAILURE() << "no ipj::Error thrown";
  return ErrorCategory::internal;
}

struct Golden {
  testing::TempDir dir;
  torch::Tensor input, expected, normalized_expected;
  Golden() {
    const std::string script = testing::test_source_dir() + "/infer/make_torchscript_golden.py";
    const auto result =
        testing::run_cached_maker(testing::python_path() + " " + script, dir.path(), "", {script});
    if (result.exit_code != 0) throw std::runtime_error("golden script failed: " + result.err);
    torch::jit::Module holder = torch::jit::load(dir.file("golden.pt"));
    input = holder.attr("input").toTensor();
    expected = holder.attr("expected").toTensor();
    normalized_expected = holder.attr("normalized_expected").toTensor();
  }
};

const Golden& golden() {
  static const Golden instance;
  return instance;
}

TEST(InferTorchScript, ScriptedAndTracedModelsMatchPyTorch) {
  for (const char* name : {"scripted.pt", "traced.pt"}) {
    LoadOptions options;
    options.inputs.input_shape = {1, 28, 28};
    const InferenceModelPtr model = load_inference_model(golden().dir.file(name), options);
    EXPECT_EQ(model->format, ModelFormat::torchscript);
    EXPECT_EQ(model->variant, Variant::fp32);
    const torch::Tensor output = model->forward(golden().input);
    EXPECT_LT((output - golden().expected).abs().max().item<double>(), 1e-5) << name;

    options.run.variant = Variant::jit;  // frozen + optimize_for_inference
    const torch::Tensor frozen =
        load_inference_model(golden().dir.file(name), options)->forward(golden().input);
    EXPECT_LT((frozen - golden().expected).abs().max().item<double>(), 1e-4) << name;
  }
}

TEST(InferTorchScript, MeanAndStdPreprocessTheInput) {
  LoadOptions options;
  options.inputs.input_shape = {1, 28, 28};
  options.inputs.mean = {0.25f};
  options.inputs.std = {0.5f};
  const torch::Tensor output =
      load_inference_model(golden().dir.file("scripted.pt"), options)->forward(golden().input);
  EXPECT_LT((output - golden().normalized_expected).abs().max().item<double>(), 1e-5);
}

// OUT/model.pt of `ipj train` carries model_info as its ipj.json extra file: loading it without
// --input-shape,
// --mean and --std uses the recorded ones; explicit values still win; a damaged one is a clear error.
TEST(InferTorchScript, TrainedFileBringsItsInputShapeAndNormalisation) {
  testing::TempDir dir;
  torch::jit::Module module = torch::jit::load(golden().dir.file("scripted.pt"));
  const std::string trained = dir.file("model.pt"), damaged = dir.file("damaged.pt");
  const json info = {{"name", "SmallNet"},
                     {"input_shape", {1, 28, 28}},
                     {"model_input_shape", {1, 28, 28}},
                     {"num_classes", 10},
                     {"mean", {0.25}},
                     {"std", {0.5}}};
  module.save(trained, {{"ipj.json", info.dump()}});
  module.save(damaged, {{"ipj.json", "{\"mean\": [0.25], \"std\": \"wide\"}"}});

  const InferenceModelPtr recorded = load_inference_model(trained, LoadOptions());
  EXPECT_EQ(recorded->sample_shape, (std::vector<std::int64_t>{1, 28, 28}));
  EXPECT_LT((recorded->forward(golden().input) - golden().normalized_expected).abs().max().item<double>(),
            1e-5);
  LoadOptions explicit_flags;
  explicit_flags.inputs.mean = {0.0f};
  explicit_flags.inputs.std = {1.0f};
  const torch::Tensor flagged = load_inference_model(trained, explicit_flags)->forward(golden().input);
  EXPECT_LT((flagged - golden().expected).abs().max().item<double>(), 1e-5);
  LoadOptions int8;
  int8.run.variant = Variant::int8_dynamic;  // the graph import needs the input shape: taken from the file
  const torch::Tensor quantized = load_inference_model(trained, int8)->forward(golden().input);
  EXPECT_TRUE(quantized.argmax(1).equal(golden().normalized_expected.argmax(1)));
  EXPECT_EQ(category_of([&] { load_inference_model(damaged, LoadOptions()); }), ErrorCategory::invalid_input);
}

TEST(InferVariants, JitBf16AndInt8AgreeWithFp32OnACheckpoint) {
  const std::string checkpoint = testing::trained_checkpoint("cnn");
  LoadOptions options;
  const InferenceModelPtr fp32 = load_inference_model(checkpoint, options);
  EXPECT_EQ(fp32->format, ModelFormat::ipj_checkpoint);
  EXPECT_EQ(fp32->sample_shape, (std::vector<std::int64_t>{1, 28, 28}));
  torch::manual_seed(5);
  const torch::Tensor pixels = torch::rand({16, 1, 28, 28});
  const torch::Tensor reference = fp32->forward(pixels);
  const double range = (reference.max() - reference.min()).item<double>();
  for (const char* variant : {"jit", "bf16", "int8-dynamic", "int8-static"}) {
    if (std::string(variant) == "bf16" && testing::onednn_refuses_bf16()) continue;  // test-as-avx2.sh
    options.run.variant = parse_variant(variant);
    const InferenceModelPtr model = load_inference_model(checkpoint, options);
    EXPECT_EQ(choice_name(model->variant), variant);
    const double tolerance = std::string(variant) == "jit" ? 1e-4 : 0.1 * range;
    EXPECT_LT((model->forward(pixels) - reference).abs().max().item<double>(), tolerance) << variant;
  }
}

TEST(InferErrors, BadFilesAndVariantsGetClearErrors) {
  testing::TempDir dir;
  std::ofstream(dir.file("junk.pt")) << "definitely not a zip archive";
  EXPECT_EQ(category_of([&] { load_inference_model(dir.file("junk.pt")); }), ErrorCategory::invalid_input);
  EXPECT_EQ(category_of([&] { load_inference_model(dir.file("missing.pt")); }), ErrorCategory::io);
  // A variant is text only where it enters (--variants, a served model's config): parsed there, named in the
  // error.
  EXPECT_EQ(category_of([] { parse_variant("int9"); }), ErrorCategory::usage);
  try {
    parse_variant("int9", "--variants");
    ADD_FAILURE() << "int9 parsed";
  } catch (const Error& error) {
    EXPECT_STREQ(
        error.what(),
        "--variants: unknown variant 'int9': use file, fp32, bf16, jit, int8-dynamic, int8-static, int8-qat");
  }
  for (const std::string& name : variant_names())
    EXPECT_EQ(choice_name(parse_variant(name)), name);
  EXPECT_EQ(variant_names().size(), 6u);  // every variant but file
  LoadOptions options;
  // int8-static of a TorchScript file goes through the graph IR and needs the shape (int8-dynamic does not:
  // it quantizes the module's nn.Linear layers as they are).
  options.run.variant = Variant::int8_static;
  EXPECT_EQ(category_of([&] { load_inference_model(golden().dir.file("scripted.pt"), options); }),
            ErrorCategory::usage);
  EXPECT_EQ(category_of([] { parse_shape("1,x,28", "--input-shape"); }), ErrorCategory::usage);
  EXPECT_EQ(parse_shape("3,32,32", "--input-shape"), (std::vector<std::int64_t>{3, 32, 32}));
}

TEST(InferBench, QuantilesInterpolateBetweenOrderStatistics) {
  EXPECT_DOUBLE_EQ(quantile({4.0, 1.0, 3.0, 2.0, 5.0}, 0.5), 3.0);
  EXPECT_DOUBLE_EQ(quantile({1.0, 2.0}, 0.5), 1.5);
  EXPECT_DOUBLE_EQ(quantile({1.0, 2.0, 3.0, 4.0, 5.0}, 0.99), 4.96);
  EXPECT_DOUBLE_EQ(quantile({}, 0.5), 0.0);
}

TEST(InferBench, StabilityRuleLooksAtTheLastWindowsOnly) {
  EXPECT_TRUE(windows_agree({100.0, 50.0, 100.0, 105.0, 95.0}, 3, 0.10));  // (105 - 95) / 100 = 10%
  EXPECT_FALSE(windows_agree({100.0, 50.0, 100.0, 105.0, 94.0}, 3, 0.10));
  EXPECT_FALSE(windows_agree({100.0, 100.0, 50.0}, 3, 0.10));  // the newest window breaks it
  EXPECT_FALSE(windows_agree({100.0, 100.0}, 3, 0.10));        // too few windows
  EXPECT_FALSE(windows_agree({0.0, 0.0, 0.0}, 3, 0.10));       // nothing ran
  EXPECT_TRUE(windows_agree({80.0, 120.0}, 2, 0.5));
}

// A model that is never run: only its labels matter to the thread policy.
struct LabelledModel : InferenceModel {
  LabelledModel(std::string name, std::string kind) {
    model_name = std::move(name);
    variant = parse_variant(kind);
  }
  torch::Tensor forward(const torch::Tensor& input) const override { return input; }
};

TEST(InferBench, ThreadPolicyGivesOpenBlasOnlyFp32ModelsWithoutConvolutions) {
  EXPECT_EQ(inference_thread_workload(LabelledModel("mlp", "fp32")), device::ThreadWorkload::fp32_gemm);
  EXPECT_EQ(inference_thread_workload(LabelledModel("mlp", "bf16")), device::ThreadWorkload::onednn);
  EXPECT_EQ(inference_thread_workload(LabelledModel("mlp", "int8-dynamic")), device::ThreadWorkload::onednn);
  EXPECT_EQ(inference_thread_workload(LabelledModel("cnn", "fp32")), device::ThreadWorkload::onednn);
  EXPECT_EQ(inference_thread_workload(LabelledModel("resnet18", "fp32")), device::ThreadWorkload::onednn);
  EXPECT_EQ(inference_thread_workload(LabelledModel("UserNet", "fp32")), device::ThreadWorkload::onednn);
}

// A forward that sleeps costs no CPU; one that spins on the calling thread costs its whole latency.
class TimedForward : public InferenceModel {
 public:
  explicit TimedForward(bool spin) : spin_(spin) { sample_shape = {2}; }
  torch::Tensor forward(const torch::Tensor& input) const override {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(2);
    if (!spin_) std::this_thread::sleep_until(end);
    while (std::chrono::steady_clock::now() < end) {
    }
    return input;
  }

 private:
  bool spin_ = false;
};

TEST(InferBench, CpuTimePerCallCountsWorkNotWaiting) {
  BenchOptions options;
  options.warmup_s = 0.01;
  options.window_s = 0.05;
  options.tolerance = 1e9;
  // Other threads of this process count too: OpenBLAS's worker yields in a loop for a while after a GEMM (and
  // after LibTorch loads), which cost a sleeping 2 ms call ~1.6 CPU-ms in one CI run under ctest -j2. So the
  // sleeping side is measured until the process is quiet (a few tries of ~0.2 s), then the spinning side at
  // once.
  BenchRow sleeping = run_latency_bench(TimedForward(false), 1, options, nullptr);
  for (int attempt = 0; attempt < 10 && sleeping.cpu_ms_per_call > 0.3; ++attempt)
    sleeping = run_latency_bench(TimedForward(false), 1, options, nullptr);
  const BenchRow spinning = run_latency_bench(TimedForward(true), 1, options, nullptr);
  EXPECT_GE(sleeping.mean_ms, 2.0);
  EXPECT_LT(sleeping.cpu_ms_per_call, 1.0);
  EXPECT_GT(spinning.cpu_ms_per_call, sleeping.cpu_ms_per_call + 0.5);
  EXPECT_LT(spinning.cpu_ms_per_call, 2.0 * spinning.mean_ms + 0.5);
}

TEST(InferBench, ModelBenchRunsVariantsTimesBatchesAndLeavesThreadSettingsAsFound) {
  if (testing::onednn_refuses_bf16())
    GTEST_SKIP() << "ONEDNN_MAX_CPU_ISA keeps oneDNN off this CPU's bf16 (scripts/test-as-avx2.sh)";
  ModelBenchOptions options;
  options.model_path = testing::trained_checkpoint("mlp");
  options.variants = {Variant::fp32, Variant::bf16};
  options.batches = {1, 4};
  options.bench.warmup_s = 0.01;
  options.bench.window_s = 0.02;
  options.bench.max_windows = 3;
  options.test_limit = 200;
  options.measure_energy = false;
  const int threads_before = at::get_num_threads();
  const device::MallocSettings malloc_before = device::current_malloc_settings();
  const ModelBenchReport report = run_model_bench(options);
  EXPECT_EQ(at::get_num_threads(), threads_before);          // each variant's plan was scoped
  if (malloc_before != device::MallocSettings::untouched) {  // glibc's dynamic threshold cannot come back
    EXPECT_EQ(device::current_malloc_settings(), malloc_before);
  }
  ASSERT_EQ(report.rows.size(), 4u);
  ASSERT_EQ(report.variants.size(), 2u);
  EXPECT_EQ(report.rows[0].variant, "fp32");
  EXPECT_EQ(report.rows[1].batch, 4);
  EXPECT_EQ(report.rows[3].variant, "bf16");
  for (const BenchedVariant& variant : report.variants) {
    ASSERT_TRUE(variant.test_acc.has_value()) << variant.variant;
    EXPECT_GT(*variant.test_acc, 0.5) << variant.variant;
  }
  EXPECT_EQ(report.rows[2].test_acc, report.variants[1].test_acc);
  EXPECT_EQ(report.rows[0].energy_source, std::nullopt);
  const Json json = to_json(report);
  EXPECT_EQ(json["kind"], "bench");
  EXPECT_EQ(json["allocator"], report.allocator);  // glibc's malloc tuned for the bench, then put back
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
  EXPECT_NE(report.allocator.find("256 MiB"), std::string::npos) << report.allocator;
#endif
  EXPECT_EQ(json["dataset"]["test_samples"], 200);
  EXPECT_FALSE(json["dataset"].contains("train_samples"));  // the accuracy pass reads test images only
  EXPECT_TRUE(json["rows"][0]["j_per_1000"].is_null());

  options.measure_accuracy = false;
  options.variants = {Variant::fp32};
  EXPECT_FALSE(to_json(run_model_bench(options)).contains("dataset"));  // no accuracy pass, no data set
  // `file` on a float checkpoint is its fp32 variant: measured once, not as a second row named fp32
  options.variants = {Variant::fp32, Variant::file};
  options.batches = {1};
  const ModelBenchReport twice = run_model_bench(options);
  EXPECT_EQ(twice.rows.size(), 1u);
  EXPECT_EQ(twice.variants.size(), 1u);
  // (a busy machine adds its own warning after it)
  EXPECT_EQ(std::count_if(twice.warnings.begin(), twice.warnings.end(),
                          [](const std::string& warning) {
                            return warning.find("already measured") != std::string::npos;
                          }),
            1)
      << Json(twice.warnings).dump();
  options.batches = {};
  EXPECT_EQ(category_of([&] { run_model_bench(options); }), ErrorCategory::usage);
}

TEST(InferBench, WindowsLatenciesThroughputAndEnergyAreConsistent) {
  const InferenceModelPtr model = load_inference_model(testing::trained_checkpoint("mlp"));
  energy::EnergyMonitor monitor(energy::discover_meters());
  BenchOptions options;
  options.warmup_s = 0.05;
  options.window_s = 0.1;
  options.tolerance = 1e9;  // any three windows count as stable: this test checks the arithmetic, not the VM
  const BenchRow row = run_latency_bench(*model, 8, options, &monitor);
  EXPECT_EQ(row.windows, 3);
  EXPECT_TRUE(row.stable);
  EXPECT_GT(row.calls, 0);
  EXPECT_LE(row.p50_ms, row.p90_ms);
  EXPECT_LE(row.p90_ms, row.p99_ms);
  // throughput = samples / time spent in the calls of the three windows (within the loop's own overhead)
  EXPECT_NEAR(row.throughput_per_s, 8.0 * 1000.0 / row.mean_ms, 0.05 * row.throughput_per_s);
  EXPECT_GT(row.j_per_1000, 0.0);
  EXPECT_TRUE(row.energy_source.has_value());

  EXPECT_GT(row.cpu_ms_per_call, 0.0);
  EXPECT_EQ(to_json(row)["cpu_ms_per_call"], row.cpu_ms_per_call);
  EXPECT_EQ(to_json(row)["calls"], row.calls);
  EXPECT_EQ(to_json(row)["xnnpack_calls"], row.xnnpack_calls);

  InferenceModel* unknown = nullptr;
  LoadOptions no_shape;
  const InferenceModelPtr script = load_inference_model(golden().dir.file("scripted.pt"), no_shape);
  EXPECT_EQ(category_of([&] { run_latency_bench(*script, 1, options, nullptr); }), ErrorCategory::usage);
  (void)unknown;
}

// A row counts the calls an XNNPACK runtime answered: all of them with the engine forced for the row's batch
// (on one thread, which any caller has), none on eager.
TEST(InferBench, RowsCountTheCallsAnXnnpackRuntimeAnswered) {
  BenchOptions options;
  options.warmup_s = 0.01;
  options.window_s = 0.02;
  options.tolerance = 1e9;
  LoadOptions load;
  load.run.fp32_engine_batch = 8;
  load.run.pool_threads = 1;
  load.run.fp32_engine = Fp32Engine::eager;
  const InferenceModelPtr eager = load_inference_model(testing::trained_checkpoint("mlp"), load);
  const BenchRow on_eager = run_latency_bench(*eager, 8, options, nullptr);
  EXPECT_GT(on_eager.calls, 0);
  EXPECT_EQ(on_eager.xnnpack_calls, 0);
  if (!xnnpack_runtime_available()) GTEST_SKIP() << "built without XNNPACK";
  load.run.fp32_engine = Fp32Engine::xnnpack;
  const InferenceModelPtr forced = load_inference_model(testing::trained_checkpoint("mlp"), load);
  const BenchRow on_xnnpack = run_latency_bench(*forced, 8, options, nullptr);
  EXPECT_GT(on_xnnpack.calls, 0);
  EXPECT_EQ(on_xnnpack.xnnpack_calls, on_xnnpack.calls);
  EXPECT_EQ(to_json(on_xnnpack)["xnnpack_calls"], on_xnnpack.calls);
}

using testing::ipj;

TEST(InferCli, QuantizeAndBenchJsonContracts) {
  testing::TempDir dir;
  const std::string checkpoint = testing::trained_checkpoint("mlp");
  const auto quantized = ipj("quantize --model " + checkpoint +
                             " --mode dynamic --test-limit 1000 --json --out " + dir.file("mlp-int8.pt"));
  ASSERT_EQ(quantized.exit_code, 0) << quantized.err;
  const json report = json::parse(quantized.out);
  for (const char* key : {"fp32_acc", "int8_acc", "acc_drop_pt", "fp32_bytes", "int8_bytes"})
    EXPECT_TRUE(report.contains(key)) << key;
  EXPECT_NEAR(report["acc_drop_pt"].get<double>(),
              (report["fp32_acc"].get<double>() - report["int8_acc"].get<double>()) * 100.0, 1e-9);
  EXPECT_LT(report["int8_bytes"].get<double>() * 3.5, report["fp32_bytes"].get<double>());
  ASSERT_TRUE(std::filesystem::exists(dir.file("mlp-int8.pt")));

  const auto bench = ipj("bench --model " + checkpoint +
                         " --variants fp32,int8-dynamic --batch 1,64 --window-s 0.05 --warmup-s 0.02 "
                         "--test-limit 500 --json");
  ASSERT_EQ(bench.exit_code, 0) << bench.err;
  const json rows = json::parse(bench.out)["rows"];
  ASSERT_EQ(rows.size(), 4u);  // variant x batch
  for (const auto& row : rows) {
    for (const char* key :
         {"variant", "batch", "p50_ms", "p99_ms", "throughput_per_s", "j_per_1000", "energy_source"})
      EXPECT_TRUE(row.contains(key)) << key;
    EXPECT_GT(row["throughput_per_s"].get<double>(), 0.0);
  }
  EXPECT_EQ(rows[0]["variant"], "fp32");
  EXPECT_EQ(rows[1]["batch"], 64);
  EXPECT_EQ(rows[2]["variant"], "int8-dynamic");

  // the int8 file written by quantize is accepted by bench as it is
  const auto file_bench = ipj("bench --model " + dir.file("mlp-int8.pt") +
                              " --batch 4 --window-s 0.05 --warmup-s 0.02 --no-accuracy --json");
  ASSERT_EQ(file_bench.exit_code, 0) << file_bench.err;
  EXPECT_EQ(json::parse(file_bench.out)["rows"][0]["variant"], "int8-dynamic");
}

TEST(InferCli, GuardFailureExitsSixAndWritesNothing) {
  testing::TempDir dir;
  const auto result =
      ipj("quantize --model " + testing::trained_checkpoint("mlp") +
          " --mode static --observer percentile --percentile 50.5 --calib 200 --test-limit 1000 "
          "--json --out " +
          dir.file("bad.pt"));
  EXPECT_EQ(result.exit_code, 6) << result.err;
  EXPECT_NE(result.err.find("not written"), std::string::npos) << result.err;
  EXPECT_FALSE(json::parse(result.out)["accepted"].get<bool>());
  EXPECT_FALSE(std::filesystem::exists(dir.file("bad.pt")));
}

}  // namespace
}  // namespace ipj::infer

#include "ipj/infer/compiled_evaluation.hpp"
#include "ipj/train/trainer.hpp"

namespace ipj::infer {
namespace {

TEST(CompileJit, FrozenEvaluationMatchesEagerEvaluation) {
  data::Dataset small = testing::fashion_subset();
  small.train.truncate(1000);
  small.test.truncate(1000);
  train::TrainConfig config;
  config.model = "cnn";
  config.epochs = 1;
  config.seed = 2;
  config.measure_energy = false;
  train::TrainHooks hooks;
  hooks.show_progress = false;
  const train::TrainResult eager = train::run_training(config, small, hooks);
  config.compile = train::CompileMode::jit;
  hooks.evaluate = [](models::Classifier& model, const data::Dataset& data, std::int64_t batch) {
    return evaluate_compiled(model, "cnn", data, batch);
  };
  const train::TrainResult compiled = train::run_training(config, small, hooks);
  EXPECT_NEAR(compiled.test_acc, eager.test_acc, 0.002);  // same weights; folding changes rounding only
  EXPECT_NEAR(compiled.epochs[0].test_loss, eager.epochs[0].test_loss, 1e-3);
  EXPECT_EQ(compiled.report["config"]["compile"], "jit");
  EXPECT_EQ(category_of([] { require_compilable("resnet18"); }), ErrorCategory::unsupported);
}

TEST(Calibration, OneFolderRuleAndAShapeCheckForEveryFormat) {
  CalibrationSource source;
  EXPECT_EQ(calibration_folder(source, ""), data::kDefaultDataDirectory);  // nothing recorded, nothing given
  EXPECT_EQ(calibration_folder(source, "/data/recorded"), "/data/recorded");
  source.data = "/data/given";
  EXPECT_EQ(calibration_folder(source, "/data/recorded"), "/data/given");  // --data wins over the record

  source.data.clear();
  source.samples = 12;
  const CalibrationImages images = load_calibration_images(source, "", {}, {1, 28, 28});
  EXPECT_EQ(images.folder, data::kDefaultDataDirectory);
  EXPECT_EQ(images.images.count, 12);
  EXPECT_EQ(images.images.channels, 1);
  try {
    load_calibration_images(source, "", {}, {3, 32, 32});
    ADD_FAILURE() << "a 3x32x32 model calibrated on 1x28x28 images";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::invalid_input);
    EXPECT_NE(std::string(error.what()).find(data::kDefaultDataDirectory), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace ipj::infer
