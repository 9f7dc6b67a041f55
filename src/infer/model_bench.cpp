// `ipj bench`'s orchestration: variants x batch sizes of one model file, the data fallback of the accuracy
// pass, the thread plan of each variant, one energy monitor for the whole run.
#include "ipj/infer/model_bench.hpp"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <new>
#include <optional>

#include "ipj/core/error.hpp"
#include "ipj/data/batch_loader.hpp"
#include "ipj/data/data_record.hpp"
#include "ipj/data/dataset.hpp"
#include "ipj/device/device_report.hpp"
#include "ipj/device/process_settings.hpp"
#include "ipj/energy/energy_monitor.hpp"
#include "ipj/models/catalog.hpp"
#include "ipj/train/evaluate.hpp"

namespace ipj::infer {
namespace {

// The folder of the accuracy pass: the given one, else the one the model was trained on, else the default.
std::string accuracy_data_folder(const LoadOptions& load, const InferenceModel& model) {
  return calibration_folder(load.calibration, model.data_dir);
}

// The data set's "dataset" object without what only the (1-sample) training split says: the models
// normalise with the statistics they were trained with, not those of one training image.
Json accuracy_dataset_json(const data::Dataset& dataset) {
  Json json = data::to_json(dataset);
  for (const char* key : {"train_samples", "mean", "std"})
    json.erase(key);
  return json;
}

}  // namespace

device::ThreadWorkload inference_thread_workload(const InferenceModel& model) {
  const models::ModelEntry* entry = models::find_model_entry(model.model_name);
  const bool convolutional = entry == nullptr || entry->convolutional;  // unknown graphs: oneDNN
  return device::thread_workload(model.variant == Variant::fp32, convolutional);
}

namespace {

// The first line of a failure's message (LibTorch messages carry backtraces).
std::string first_line(const std::string& message) {
  return message.substr(0, message.find('\n'));
}

// Runs `step`; an ipj::Error other than io, or a LibTorch/std exception, becomes a skipped row (the first
// such failure is kept in `first_failure` for the case that nothing at all could be measured). `hint` follows
// a LibTorch failure's cause (what the inputs were).
template <typename Step>
bool try_variant_step(ModelBenchReport& report, const std::string& variant, std::int64_t batch, Step step,
                      std::optional<Error>& first_failure, const std::string& hint = "") {
  try {
    step();
    return true;
  } catch (const Error& error) {
    if (error.category() == ErrorCategory::io) throw;
    report.skipped.push_back({variant, batch, first_line(error.what())});
    if (!first_failure) first_failure = Error(error.category(), error.what());
  } catch (const std::bad_alloc&) {
    report.skipped.push_back({variant, batch, "out of memory"});
    if (!first_failure) first_failure = Error(ErrorCategory::runtime, "out of memory; use a smaller --batch");
  } catch (const std::exception& error) {  // LibTorch's: the line that names the cause, not the traceback
    report.skipped.push_back({variant, batch, error_cause(error.what()) + hint});
    if (!first_failure)
      first_failure =
          Error(ErrorCategory::unsupported, "variant " + variant + ": " + error_cause(error.what()) + hint);
  }
  return false;
}

// What follows a LibTorch failure of a batch: " (on [64, 3, 9, 9] inputs: is --input-shape ...?)"; "" with no
// sample shape.
std::string wrong_inputs_hint(std::int64_t batch, const std::vector<std::int64_t>& sample_shape) {
  if (sample_shape.empty()) return "";
  std::string inputs = "[" + std::to_string(batch);
  for (const std::int64_t size : sample_shape)
    inputs += ", " + std::to_string(size);
  return " (on " + inputs + "] inputs: is --input-shape the shape of one of the model's samples?)";
}

void add_warning_once(std::vector<std::string>& warnings, const std::string& warning) {
  if (std::find(warnings.begin(), warnings.end(), warning) == warnings.end()) warnings.push_back(warning);
}

// --variants fp32,file on a float file: `file` is the fp32 variant again (two rows named fp32 could not be
// told apart); true, with a warning, when `model` was measured already.
bool skip_repeated_variant(ModelBenchReport& report, const InferenceModel& model) {
  const std::string name = choice_name(model.variant);
  const bool repeated = std::any_of(
      report.variants.begin(), report.variants.end(),
      [&](const BenchedVariant& seen) { return seen.variant == name && seen.path == model.path; });
  if (repeated)
    add_warning_once(report.warnings, "--variants file: '" + model.path + "' as stored is its " + name +
                                          " variant, already measured");
  return repeated;
}

// Test accuracy of one variant; a model that cannot run on the data set's images is invalid input (the data
// or the flags do not fit the model), and more classes than outputs make the accuracy meaningless.
double variant_accuracy(const InferenceModel& model, const data::Dataset& dataset,
                        std::vector<std::string>& warnings) {
  torch::Tensor logits;
  try {
    data::for_each_pixel_batch_in_order(dataset.test, 1, 1,
                                        [&](const torch::Tensor& pixels, const torch::Tensor&) {
                                          if (!logits.defined()) logits = model.forward(pixels);
                                        });
  } catch (const Error&) {
    throw;
  } catch (const std::exception& error) {
    const auto& images = dataset.test;
    // bf16 runs on oneDNN's bf16 kernels, which a oneDNN cap (ONEDNN_MAX_CPU_ISA) can refuse: say so too
    const std::string bf16_hint =
        model.variant == Variant::bf16
            ? "; if its fp32 variant runs, LibTorch's bf16 kernels failed here (oneDNN's bf16 support: ipj "
              "devices, onednn_isa_cap)"
            : "";
    fail(ErrorCategory::invalid_input,
         "'" + model.path + "' cannot run on the images of '" + dataset.directory + "' (" +
             std::to_string(images.channels) + "x" + std::to_string(images.height) + "x" +
             std::to_string(images.width) + "): " + error_cause(error.what()) + bf16_hint +
             "; check --data, --input-shape, --channels and --resize");
  }
  const std::int64_t outputs = logits.defined() && logits.dim() == 2 ? logits.size(1) : 0;
  if (outputs > 0 && dataset.num_classes > outputs) {
    const std::string warning = "'" + dataset.directory + "' has " + std::to_string(dataset.num_classes) +
                                " classes but the model gives " + std::to_string(outputs) +
                                " outputs: its test accuracy there means nothing";
    add_warning_once(warnings, warning);
  }
  return train::pixel_accuracy([&](const torch::Tensor& x) { return model.forward(x); }, dataset.test, 256);
}

// fp32 engines are timed at batch 1 and at the largest batch benched up to 64 (loading stays quick), or at 64
// when every batch benched is larger.
std::int64_t fp32_timed_batch(const std::vector<std::int64_t>& batches) {
  std::int64_t timed = 0;
  for (const std::int64_t batch : batches)
    if (batch <= 64) timed = std::max(timed, batch);
  return timed > 1 ? timed : std::min<std::int64_t>(64, *std::max_element(batches.begin(), batches.end()));
}

}  // namespace

ModelBenchReport run_model_bench(const ModelBenchOptions& options) {
  if (options.variants.empty() || options.batches.empty())
    fail(ErrorCategory::usage, "--variants and --batch must not be empty");
  energy::MeterOptions meter_options;
  meter_options.cpu_tdp_w = options.cpu_tdp_w;
  energy::MonitorOptions monitor_options;
  monitor_options.interval_ms = options.energy_interval_ms;
  energy::EnergyMonitor monitor(
      options.measure_energy ? energy::discover_meters(meter_options) : energy::MeterSet{}, monitor_options);

  ModelBenchReport report;
  report.model_path = options.model_path;
  report.window_s = options.bench.window_s;
  // large freed blocks reused from the heap, as in training: with glibc's defaults an eager cnn's batch of 64
  // page-faults its activations on every call (55 ms against 8 ms per batch), at load's timings too
  const device::ScopedAllocator allocator(device::AllocatorChoice::tuned);
  report.allocator = allocator.plan().reason;
  std::optional<data::Dataset> dataset;  // read once, for the first variant that needs it
  std::optional<Error> first_failure;
  LoadOptions load = options.load;
  load.run.fp32_engine_batch = fp32_timed_batch(options.batches);
  // a runtime for a batch size no row runs would cost load time and memory for nothing
  load.run.batched_xnnpack = std::find(options.batches.begin(), options.batches.end(),
                                       load.run.fp32_engine_batch) != options.batches.end();
  const device::MachineState machine = device::read_machine_state();
  // batch 1 and the XNNPACK runtimes are timed against the pool the rows will run on: --threads, else the
  // tuned plan's CPUs on the machine as it is now (a neighbour's CPU left out: a runtime built for every CPU
  // would run nowhere under the busy plan), else (the python plan) every CPU available
  load.run.pool_threads = options.threads > 0 ? options.threads
                          : options.thread_plan == device::ThreadPlanChoice::tuned
                              ? device::usable_cpus(machine)
                              : 0;
  device::LoadSampler sampler(machine.limits);
  for (const Variant requested : options.variants) {
    load.run.variant = requested;
    const std::string variant = choice_name(requested);  // as the skipped rows name it
    if (options.show_progress) spdlog::info("loading {} as {}", options.model_path, variant);
    InferenceModelPtr model;
    if (!try_variant_step(
            report, variant, 0, [&] { model = load_inference_model(options.model_path, load); },
            first_failure))
      continue;
    if (requested == Variant::file && skip_repeated_variant(report, *model)) continue;
    for (const std::string& note : model->load_notes)
      add_warning_once(report.warnings, note);
    const device::ScopedProcessSettings threads(device::plan_for_machine(
        options.thread_plan, inference_thread_workload(*model), options.threads, machine));
    report.threads = device::to_json(threads.threads());
    BenchedVariant benched{choice_name(model->variant), choice_name(model->format), model->path,
                           model->model_name,           model->parameter_bytes,     std::nullopt,
                           model->fp32_engine,          model->batch1_threads,      model->int8_batch_engine};
    if (options.measure_accuracy) {
      if (!dataset) {
        dataset =
            data::load_dataset(accuracy_data_folder(load, *model), 1, options.test_limit,
                               data::merge_data_options(model->data_options, load.calibration.data_options));
        const std::string mismatch =
            load.calibration.data.empty() ? "" : data::describe_data_mismatch(model->trained_data, *dataset);
        if (!mismatch.empty()) report.warnings.push_back(mismatch);
      }
      if (!try_variant_step(
              report, variant, 0,
              [&] { benched.test_acc = variant_accuracy(*model, *dataset, report.warnings); }, first_failure))
        continue;
    }
    bool measured = false;
    for (const std::int64_t batch : options.batches) {
      try_variant_step(
          report, variant, batch,
          [&] {
            BenchRow row =
                run_latency_bench(*model, batch, options.bench, options.measure_energy ? &monitor : nullptr);
            row.test_acc = benched.test_acc;
            if (options.show_progress)
              spdlog::info("{} batch {}: p50 {:.3f} ms, {:.0f}/s", row.variant, batch, row.p50_ms,
                           row.throughput_per_s);
            report.rows.push_back(std::move(row));
            measured = true;
          },
          first_failure, wrong_inputs_hint(batch, model->sample_shape));
    }
    if (measured) report.variants.push_back(std::move(benched));
    // Under the thread plan of the last variant measured: the environment's thread counts are those the
    // last rows ran with.
    if (measured) report.environment = device::device_report();
  }
  if (report.rows.empty()) {
    const Error failure = first_failure.value_or(Error(ErrorCategory::internal, "no row was benched"));
    fail(failure.category(),
         std::string(failure.what()) +
             (report.skipped.size() > 1 ? " (every variant failed; the first is shown)" : ""));
  }
  if (dataset) report.dataset = accuracy_dataset_json(*dataset);
  report.machine_load = device::machine_load_json(machine.load, sampler.stop());
  if (report.machine_load["busy"].get<bool>())
    report.warnings.push_back(
        "the machine was busy (other work used >= 0.5 CPU beside the bench: see machine_load): the figures "
        "may not stand; rerun on a quiet machine");
  return report;
}

Json to_json(const ModelBenchReport& report) {
  Json variants = Json::array();
  for (const BenchedVariant& variant : report.variants)
    variants.push_back(
        {{"variant", variant.variant},
         {"format", variant.format},
         {"path", variant.path},
         {"model_name", variant.model_name},
         {"parameter_bytes", variant.parameter_bytes},
         {"test_acc", variant.test_acc ? Json(*variant.test_acc) : Json(nullptr)},
         {"fp32_engine", variant.fp32_engine ? to_json(*variant.fp32_engine) : Json(nullptr)},
         {"batch1_threads", variant.batch1_threads ? to_json(*variant.batch1_threads) : Json(nullptr)},
         {"int8_batch_engine",
          variant.int8_batch_engine ? to_json(*variant.int8_batch_engine) : Json(nullptr)}});
  Json rows = Json::array();
  for (const BenchRow& row : report.rows)
    rows.push_back(to_json(row));
  Json skipped = Json::array();
  for (const SkippedRow& row : report.skipped)
    skipped.push_back({{"variant", row.variant},
                       {"batch", row.batch > 0 ? Json(row.batch) : Json(nullptr)},
                       {"reason", row.reason}});
  Json json = {{"schema_version", kResultsSchemaVersion},
               {"kind", "bench"},
               {"model", report.model_path},
               {"window_s", report.window_s},
               {"variants", variants},
               {"rows", rows},
               {"skipped", skipped},
               {"warnings", report.warnings},
               {"environment", report.environment}};
  if (!report.dataset.is_null()) json["dataset"] = report.dataset;
  if (!report.threads.is_null()) json["threads"] = report.threads;
  if (!report.machine_load.is_null()) json["machine_load"] = report.machine_load;
  json["allocator"] = report.allocator;
  return json;
}

}  // namespace ipj::infer
