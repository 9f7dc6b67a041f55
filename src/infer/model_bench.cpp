// `ipj bench`'s orchestration: variants x batch sizes of one model file, the data fallback of the accuracy
// pass, the thread plan of each variant, one energy monitor for the whole run.
#include "ipj/infer/model_bench.hpp"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>

#include "ipj/core/error.hpp"
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
  if (!load.calibration_data.empty()) return load.calibration_data;
  if (!model.data_dir.empty()) return model.data_dir;
  return data::kDefaultDataDirectory;
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
  const auto& catalog = models::model_catalog();
  const auto entry = std::find_if(catalog.begin(), catalog.end(), [&](const models::ModelEntry& known) {
    return known.name == model.model_name;
  });
  const bool convolutional = entry == catalog.end() || entry->convolutional;  // unknown graphs: oneDNN
  return device::thread_workload(model.variant == "fp32", convolutional);
}

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
  std::optional<data::Dataset> dataset;  // read once, for the first variant that needs it
  LoadOptions load = options.load;
  for (const std::string& variant : options.variants) {
    load.variant = variant;
    if (options.show_progress) spdlog::info("loading {} as {}", options.model_path, variant);
    const InferenceModelPtr model = load_inference_model(options.model_path, load);
    const device::ScopedProcessSettings threads(
        device::plan_threads(inference_thread_workload(*model), options.threads));
    BenchedVariant benched{model->variant,    model->format,          model->path,
                           model->model_name, model->parameter_bytes, std::nullopt};
    if (options.measure_accuracy) {
      if (!dataset)
        dataset =
            data::load_dataset(accuracy_data_folder(load, *model), 1, options.test_limit,
                               data::merge_data_options(model->data_options, load.calibration_data_options));
      benched.test_acc = train::pixel_accuracy([&](const torch::Tensor& x) { return model->forward(x); },
                                               dataset->test, 256);
    }
    for (const std::int64_t batch : options.batches) {
      BenchRow row =
          run_latency_bench(*model, batch, options.bench, options.measure_energy ? &monitor : nullptr);
      row.test_acc = benched.test_acc;
      if (options.show_progress)
        spdlog::info("{} batch {}: p50 {:.3f} ms, {:.0f}/s", row.variant, batch, row.p50_ms,
                     row.throughput_per_s);
      report.rows.push_back(std::move(row));
    }
    report.variants.push_back(std::move(benched));
    // Under the last variant's thread plan, as before the plans were scoped: the environment's thread counts
    // are those the last rows ran with.
    if (report.variants.size() == options.variants.size()) report.environment = device::device_report();
  }
  if (dataset) report.dataset = accuracy_dataset_json(*dataset);
  return report;
}

Json to_json(const ModelBenchReport& report) {
  Json variants = Json::array();
  for (const BenchedVariant& variant : report.variants)
    variants.push_back({{"variant", variant.variant},
                        {"format", variant.format},
                        {"path", variant.path},
                        {"model_name", variant.model_name},
                        {"parameter_bytes", variant.parameter_bytes},
                        {"test_acc", variant.test_acc ? Json(*variant.test_acc) : Json(nullptr)}});
  Json rows = Json::array();
  for (const BenchRow& row : report.rows)
    rows.push_back(to_json(row));
  Json json = {{"schema_version", kResultsSchemaVersion},
               {"kind", "bench"},
               {"model", report.model_path},
               {"window_s", report.window_s},
               {"variants", variants},
               {"rows", rows},
               {"environment", report.environment}};
  if (!report.dataset.is_null()) json["dataset"] = report.dataset;
  return json;
}

}  // namespace ipj::infer
