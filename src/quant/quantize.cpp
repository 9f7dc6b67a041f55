// The `ipj quantize` workflow: load, fold, calibrate or fine-tune, convert, evaluate both, guard, save. One
// template serves LayerPrograms (QuantizedProgram) and graphs (QuantizedGraph).
#include "ipj/quant/quantize.hpp"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <memory>

#include "ipj/core/error.hpp"
#include "ipj/core/log.hpp"
#include "ipj/data/batch_loader.hpp"
#include "ipj/device/threading.hpp"
#include "ipj/quant/quantized_graph.hpp"
#include "ipj/quant/source_model.hpp"
#include "ipj/train/evaluate.hpp"
#include "program_training.hpp"
#include "script_workflows.hpp"

namespace ipj::quant {
namespace {

// What differs between the two model representations.
std::int64_t float_bytes(const LayerProgram& program) {
  return float_parameter_bytes(program);
}
std::int64_t float_bytes(const Graph& graph) {
  return graph_float_parameter_bytes(graph);
}
std::vector<QuantParams> observe(const LayerProgram& program, const data::ImageSet& images,
                                 const QuantizeOptions& options) {
  return calibrate(program, images, options.calib_samples, options.batch_size, options.observer,
                   options.percentile);
}
std::vector<QuantParams> observe(const Graph& graph, const data::ImageSet& images,
                                 const QuantizeOptions& options) {
  return calibrate_graph(graph, images, options.calib_samples, options.batch_size, options.observer,
                         options.percentile);
}
std::vector<QuantParams> train_aware(LayerProgram& program, const data::ImageSet& images,
                                     const QuantizeOptions& options) {
  return quantization_aware_training(program, images, options.qat_epochs, options.qat_learning_rate,
                                     options.batch_size, options.seed, options.show_progress);
}
std::vector<QuantParams> train_aware(Graph& graph, const data::ImageSet& images,
                                     const QuantizeOptions& options) {
  return quantization_aware_training_graph(graph, images, options.qat_epochs, options.qat_learning_rate,
                                           options.batch_size, options.seed, options.show_progress);
}

// The int8 candidate of either representation.
struct Conversion {
  double fp32_acc = 0.0;
  std::int64_t fp32_bytes = 0;
  std::shared_ptr<const QuantizedProgram> program;
  std::shared_ptr<const QuantizedGraph> graph;
  torch::Tensor forward(const torch::Tensor& x) const {
    return program ? program->forward(x) : graph->forward(x);
  }
};

template <typename Model, typename QuantizedModel>
std::shared_ptr<const QuantizedModel> convert(Model& model, const QuantizeOptions& options,
                                              const data::Dataset& dataset, double& fp32_acc) {
  fp32_acc = train::pixel_accuracy([&](const torch::Tensor& x) { return float_forward(model, x); },
                                   dataset.test, 256);
  std::vector<QuantParams> activation_params;
  if (options.mode == QuantMode::static_ptq) {
    activation_params = observe(model, dataset.train, options);
  } else if (options.mode == QuantMode::qat) {
    if (options.qat_epochs < 1) fail(ErrorCategory::usage, "--epochs must be >= 1 for --mode qat");
    activation_params = train_aware(model, dataset.train, options);
  }
  return std::make_shared<const QuantizedModel>(
      QuantizedModel::convert(model, options.mode, activation_params, options.engine));
}

torch::Tensor first_test_pixels(const data::ImageSet& images, std::int64_t count) {
  torch::Tensor pixels;
  data::for_each_pixel_batch_in_order(
      images, count, count, [&](const torch::Tensor& batch, const torch::Tensor&) { pixels = batch; });
  return pixels;
}

Json quantize_report(const QuantizeOptions& options, const QuantizeResult& result, const std::string& path,
                     const std::string& model_name, std::int64_t test_samples, double wall_s) {
  Json report;
  report["schema_version"] = kResultsSchemaVersion;
  report["kind"] = "quantize";
  report["model"] = path;
  report["threads"] = device::unplanned_threads_json();
  report["model_name"] = model_name;
  report["mode"] = quant_mode_name(options.mode);
  report["engine"] = result.engine;
  report["observer"] = options.observer == ObserverKind::minmax ? "minmax" : "percentile";
  report["calib_samples"] =
      options.mode == QuantMode::static_ptq ? Json(options.calib_samples) : Json(nullptr);
  report["qat_epochs"] = options.mode == QuantMode::qat ? Json(options.qat_epochs) : Json(nullptr);
  report["test_samples"] = test_samples;
  report["fp32_acc"] = result.fp32_acc;
  report["int8_acc"] = result.int8_acc;
  report["acc_drop_pt"] = result.acc_drop_pt;
  report["max_drop_pt"] = options.max_drop_pt;
  report["accepted"] = result.accepted;
  report["fp32_bytes"] = result.fp32_bytes;
  report["int8_bytes"] = result.int8_bytes;
  report["size_ratio"] =
      result.int8_bytes > 0 ? static_cast<double>(result.fp32_bytes) / result.int8_bytes : 0.0;
  report["out"] = result.written ? Json(options.out_path) : Json(nullptr);
  report["wall_s"] = wall_s;
  return report;
}

}  // namespace

Int8Regions parse_int8_regions(const std::string& name) {
  if (name == "fast") return Int8Regions::fast;
  if (name == "all") return Int8Regions::all;
  fail(ErrorCategory::usage, "--int8-regions '" + name + "': use fast or all");
}

QuantizeResult run_quantize(const QuantizeOptions& options) {
  if (!(options.max_drop_pt >= 0.0 && options.max_drop_pt <= 100.0))  // NaN fails too
    fail(ErrorCategory::usage, "--max-drop must be in 0..100 accuracy points");
  if (!(options.percentile > 0.0 && options.percentile <= 100.0))
    fail(ErrorCategory::usage, "--percentile must be in (0, 100]");
  if (!(options.qat_learning_rate > 0.0 && options.qat_learning_rate <= 100.0))
    fail(ErrorCategory::usage, "--lr must be a positive number up to 100");
  if (options.calib_samples <= 0) fail(ErrorCategory::usage, "--calib must be a positive number of samples");
  if (options.out_path.empty()) fail(ErrorCategory::usage, "--out FILE is required");
  // Dynamic int8 of a TorchScript file works on the module as it is: no operator refuses the model.
  if (options.mode == QuantMode::dynamic &&
      detect_model_file(options.model_path) == ModelFileFormat::torchscript)
    return run_quantize_script(options);
  const auto start = std::chrono::steady_clock::now();
  // Static int8 of a TorchScript file the graph importer refuses: the module as it is, int8 where it can.
  const bool script_static = options.mode == QuantMode::static_ptq &&
                             detect_model_file(options.model_path) == ModelFileFormat::torchscript;
  SourceModel source;
  try {
    source = load_source_model(options.model_path, options.import);
  } catch (const Error& error) {
    if (!script_static || error.category() != ErrorCategory::unsupported) throw;
    return run_quantize_script_static(options, error.what());
  }
  const SourceData data = source_data(source, options.data_dir, options.data_options);
  const std::string& data_dir = data.directory;
  const data::DataOptions& data_options = data.options;
  const bool needs_training_set = options.mode == QuantMode::qat;
  const data::Dataset dataset =
      data::load_dataset(data_dir, needs_training_set ? options.train_limit : options.calib_samples,
                         options.test_limit, data_options);
  Json warnings = Json::array();
  add_data_warning(source, options.data_dir, dataset, warnings);
  check_data_shape(source.program ? source.program->input_shape : source.graph->input_shape, dataset.train,
                   data_dir);
  check_data_classes(source.program ? source.program->num_classes : source.graph->num_classes, dataset,
                     source.path);
  double import_difference = 0.0;
  try {
    import_difference = check_import(source, first_test_pixels(dataset.test, 64));
  } catch (const Error& error) {
    if (!script_static || error.category() != ErrorCategory::unsupported) throw;
    return run_quantize_script_static(options, error.what());
  }

  QuantizeResult result;
  Conversion conversion;
  if (source.program) {
    result.fp32_bytes = float_bytes(*source.program);
    conversion.program =
        convert<LayerProgram, QuantizedProgram>(*source.program, options, dataset, conversion.fp32_acc);
    result.engine = conversion.program->engine();
    result.int8_bytes = conversion.program->parameter_bytes();
  } else {
    result.fp32_bytes = float_bytes(*source.graph);
    conversion.graph = convert<Graph, QuantizedGraph>(*source.graph, options, dataset, conversion.fp32_acc);
    result.engine = conversion.graph->engine();
    result.int8_bytes = conversion.graph->parameter_bytes();
  }
  const std::string model_name = source.program ? source.program->model_name : source.graph->model_name;
  result.fp32_acc = conversion.fp32_acc;
  result.int8_acc =
      train::pixel_accuracy([&](const torch::Tensor& x) { return conversion.forward(x); }, dataset.test, 256);
  result.acc_drop_pt = (result.fp32_acc - result.int8_acc) * 100.0;
  // A drop within rounding of the limit passes: accuracies are ratios of integer counts.
  result.accepted = result.acc_drop_pt <= options.max_drop_pt + 1e-9;

  Json extra = {{"fp32_acc", result.fp32_acc},
                {"int8_acc", result.int8_acc},
                {"source_checkpoint", source.path},
                {"data_dir", data_dir},
                {"data_options", data::to_json(data_options)},
                {"data_record", data::to_json(data::data_record(dataset))},
                {"calib_samples", options.calib_samples},
                {"observer", options.observer == ObserverKind::minmax ? "minmax" : "percentile"}};
  if (source.import_check) extra["import_max_rel_diff"] = import_difference;
  if (result.accepted) {
    if (conversion.program)
      conversion.program->save(options.out_path, extra);
    else
      conversion.graph->save(options.out_path, extra);
    result.written = true;
  }
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.report = quantize_report(options, result, source.path, model_name, dataset.test.count, wall_s);
  result.report["dataset"] = data::to_json(dataset);
  result.report["warnings"] = warnings;
  if (source.import_check) result.report["import_max_rel_diff"] = import_difference;
  return result;
}

}  // namespace ipj::quant
