// `ipj quantize --mode dynamic` and `ipj prune` on TorchScript files as they are (see script_workflows.hpp).
#include "script_workflows.hpp"

#include <torch/script.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>

#include "ipj/core/error.hpp"
#include "ipj/data/batch_loader.hpp"
#include "ipj/device/threading.hpp"
#include "ipj/quant/quantized_program.hpp"
#include "ipj/quant/script_model.hpp"
#include "ipj/quant/script_static.hpp"
#include "ipj/quant/source_model.hpp"
#include "ipj/train/evaluate.hpp"
#include "ipj/train/model_setup.hpp"

namespace ipj::quant {
namespace {

torch::Tensor first_pixels(const data::ImageSet& images, std::int64_t count) {
  torch::Tensor pixels;
  data::for_each_pixel_batch_in_order(
      images, count, count, [&](const torch::Tensor& batch, const torch::Tensor&) { pixels = batch; });
  return pixels;
}

double script_accuracy(const torch::jit::Module& module, const ScriptSource& source,
                       const data::ImageSet& images) {
  torch::NoGradGuard no_grad;
  return train::pixel_accuracy(
      [&](const torch::Tensor& x) { return run_script(module, source.import, x, source.path); }, images, 256);
}

// The ipj.json of a written file: the source's, with the inputs ipj ran it on and what was done to it.
Json output_info(const ScriptSource& source, const std::string& key, Json what) {
  Json info = source.info;
  info["model_input_shape"] = source.import.input_shape;
  if (!source.import.mean.empty()) {
    info["mean"] = source.import.mean;
    info["std"] = source.import.std;
  }
  info[key] = std::move(what);
  return info;
}

std::string model_name(const torch::jit::Module& module) {
  return module.type()->name() ? module.type()->name()->name() : "torchscript";
}

// The report keys both TorchScript int8 paths share, in the graph path's order; `mode` "dynamic" or "static".
// Observer and calibration keys are null here (the static path sets them).
Json script_quantize_report(const QuantizeOptions& options, const ScriptSource& source,
                            const QuantizeResult& result, const data::Dataset& dataset, const char* mode) {
  return {{"schema_version", kResultsSchemaVersion},
          {"kind", "quantize"},
          {"threads", device::unplanned_threads_json()},
          {"model", source.path},
          {"model_name", model_name(*source.module)},
          {"mode", mode},
          {"method", "torchscript"},  // the module as it is, not the graph importer
          {"engine", result.engine},
          {"observer", nullptr},
          {"calib_samples", nullptr},
          {"qat_epochs", nullptr},
          {"test_samples", dataset.test.count},
          {"fp32_acc", result.fp32_acc},
          {"int8_acc", result.int8_acc},
          {"acc_drop_pt", result.acc_drop_pt},
          {"max_drop_pt", options.max_drop_pt},
          {"accepted", result.accepted},
          {"fp32_bytes", result.fp32_bytes},
          {"int8_bytes", result.int8_bytes},
          {"size_ratio",
           result.int8_bytes > 0 ? static_cast<double>(result.fp32_bytes) / result.int8_bytes : 0.0}};
}

}  // namespace

namespace {

// What dynamic int8 of a module as it is did not do: Linear layers swapped to int8 that no forward calls in
// int8 (TorchScript's TransformerEncoderLayer fast path runs its layers' float weights in one fused kernel:
// a transformer reported 6 int8 layers where 2 ran), and a file that grew (both weight copies kept).
Json dynamic_warnings(const DynamicScript& int8, const OpCensus& census, const QuantizeResult& result) {
  Json warnings = Json::array();
  std::int64_t int8_calls = 0;
  for (const OpCount& op : census.int8_ops)
    if (op.op == "quantized::linear_dynamic") int8_calls += op.count;
  if (int8_calls < int8.quantized_layers)
    warnings.push_back(std::to_string(int8.quantized_layers) +
                       " Linear layer(s) were quantized but a forward pass " +
                       "called quantized::linear_dynamic " + std::to_string(int8_calls) +
                       " time(s): the others run in float (a fused path such as TransformerEncoderLayer's "
                       "reads the float weights, or forward does not call them); int8_ops is what ran");
  if (result.int8_bytes > result.fp32_bytes)
    warnings.push_back("the int8 file's weights (" + std::to_string(result.int8_bytes) +
                       " bytes) are larger than the float model's (" + std::to_string(result.fp32_bytes) +
                       "): layers that run in float keep their float weights beside the int8 copies");
  return warnings;
}

}  // namespace

QuantizeResult run_quantize_script(const QuantizeOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const ScriptSource source = load_script_source(options.model_path, options.import);
  const std::string data_dir =
      options.data_dir.empty() ? std::string(data::kDefaultDataDirectory) : options.data_dir;
  const data::Dataset dataset =
      data::load_dataset(data_dir, options.calib_samples, options.test_limit, options.data_options);
  check_data_shape(source.import.input_shape, dataset.train, data_dir);
  QuantizeResult result;
  result.fp32_acc = script_accuracy(*source.module, source, dataset.test);
  const DynamicScript int8 = quantize_script_dynamic(*source.module, options.engine, source.path);
  result.engine = select_quantized_engine(options.engine);
  result.int8_acc = script_accuracy(*int8.module, source, dataset.test);
  result.acc_drop_pt = (result.fp32_acc - result.int8_acc) * 100.0;
  result.accepted = result.acc_drop_pt <= options.max_drop_pt + 1e-9;  // as the graph path rounds
  result.fp32_bytes = int8.fp32_bytes;
  result.int8_bytes = int8.int8_bytes;
  const OpCensus census = census_ops(*int8.module, source.import, first_pixels(dataset.test, 4), source.path);
  if (result.accepted) {
    save_script(*int8.module, options.out_path,
                output_info(source, "quantization",
                            {{"mode", "dynamic"},
                             {"engine", result.engine},
                             {"weights", "int8 per tensor, symmetric"},
                             {"fp32_acc", result.fp32_acc},
                             {"int8_acc", result.int8_acc},
                             {"source", source.path},
                             {"data_dir", data_dir},
                             {"data_options", data::to_json(options.data_options)}}));
    result.written = true;
  }
  Json& report = result.report;
  report = script_quantize_report(options, source, result, dataset, "dynamic");
  report["int8_layers"] = int8.quantized_layers;
  report["float_layers"] = int8.float_layers;
  report["int8_ops"] = to_json(census.int8_ops);
  report["float_ops"] = to_json(census.float_ops);
  report["dataset"] = data::to_json(dataset);
  report["out"] = result.written ? Json(options.out_path) : Json(nullptr);
  report["warnings"] = dynamic_warnings(int8, census, result);
  report["wall_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

namespace {

// The report keys of the graph path plus what ran in int8 and what stayed float.
Json static_report(const QuantizeOptions& options, const ScriptSource& source, const QuantizeResult& result,
                   const StaticScript& int8, const OpCensus& census, const data::Dataset& dataset) {
  Json report = script_quantize_report(options, source, result, dataset, "static");
  report["observer"] = options.observer == ObserverKind::minmax ? "minmax" : "percentile";
  report["calib_samples"] = options.calib_samples;
  report["int8_layers"] = int8.int8_layers;
  report["float_layers"] = int8.float_layers;
  report["int8_regions"] = int8.regions;
  report["int8_regions_rule"] = options.int8_regions == Int8Regions::all ? "all" : "fast";
  report["int8_ops"] = to_json(census.int8_ops);
  report["float_ops"] = to_json(census.float_ops);
  report["border_ops"] = to_json(census.border_ops);
  report["dataset"] = data::to_json(dataset);
  report["out"] = result.written ? Json(options.out_path) : Json(nullptr);
  return report;
}

}  // namespace

QuantizeResult run_quantize_script_static(const QuantizeOptions& options,
                                          const std::string& fallback_reason) {
  const auto start = std::chrono::steady_clock::now();
  const ScriptSource source = load_script_source(options.model_path, options.import);
  const data::DataRecord trained =
      train::trained_data_record(source.info.empty() ? std::string() : source.info.dump(), source.path);
  const std::string data_dir = !options.data_dir.empty()    ? options.data_dir
                               : !trained.directory.empty() ? trained.directory
                                                            : std::string(data::kDefaultDataDirectory);
  const data::DataOptions data_options = data::merge_data_options(trained.options, options.data_options);
  const data::Dataset dataset =
      data::load_dataset(data_dir, options.calib_samples, options.test_limit, data_options);
  check_data_shape(source.import.input_shape, dataset.train, data_dir);
  QuantizeResult result;
  result.fp32_acc = script_accuracy(*source.module, source, dataset.test);
  StaticScriptOptions static_options;
  static_options.engine = options.engine;
  static_options.observer = options.observer;
  static_options.percentile = options.percentile;
  static_options.calib_samples = options.calib_samples;
  static_options.batch_size = options.batch_size;
  static_options.every_region = options.int8_regions == Int8Regions::all;
  const StaticScript int8 =
      quantize_script_static(*source.module, source.import, dataset.train, static_options, source.path);
  result.engine = int8.engine;
  result.int8_acc = script_accuracy(*int8.module, source, dataset.test);
  result.acc_drop_pt = (result.fp32_acc - result.int8_acc) * 100.0;
  result.accepted = result.acc_drop_pt <= options.max_drop_pt + 1e-9;  // as the graph path rounds
  result.fp32_bytes = int8.fp32_bytes;
  result.int8_bytes = int8.int8_bytes;
  const OpCensus census = census_ops(*int8.module, source.import, first_pixels(dataset.test, 4), source.path);
  if (result.accepted) {
    save_script(*int8.module, options.out_path,
                output_info(source, "quantization",
                            {{"mode", "static"},
                             {"engine", result.engine},
                             {"weights", "int8 per channel, symmetric"},
                             {"activations", "quint8 per tensor, affine"},
                             {"fp32_acc", result.fp32_acc},
                             {"int8_acc", result.int8_acc},
                             {"source", source.path},
                             {"data_dir", data_dir},
                             {"data_options", data::to_json(data_options)}}));
    result.written = true;
  }
  result.report = static_report(options, source, result, int8, census, dataset);
  Json warnings = Json::array();
  warnings.push_back("static int8 on the TorchScript module as it is (int8 regions, float elsewhere): " +
                     fallback_reason);
  if (int8.int8_layers == 0)
    warnings.push_back(
        options.int8_regions == Int8Regions::all
            ? "no conv2d/linear call runs in int8; the written model is float"
            : "no conv2d/linear call runs in int8 (each int8 region was too small to pay for its "
              "quantize/dequantize under --int8-regions fast); the written model is float: --int8-regions "
              "all "
              "quantizes every region");
  for (const std::string& warning : int8.warnings)
    warnings.push_back(warning);
  result.report["warnings"] = warnings;
  result.report["wall_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

Json run_prune_script(const PruneOptions& options, const std::string& structured_refusal) {
  if (options.out_path.empty()) fail(ErrorCategory::usage, "--out FILE is required");
  if (options.epochs < 0) fail(ErrorCategory::usage, "--epochs must be >= 0");
  if (!(options.sparsity >= 0.0 && options.sparsity < 1.0))  // NaN fails too
    fail(ErrorCategory::usage, "--sparsity must be in [0, 1)");
  if (!(options.learning_rate > 0.0 && options.learning_rate <= 100.0))
    fail(ErrorCategory::usage, "--lr must be a positive number up to 100");
  const ScriptSource source = load_script_source(options.model_path, options.import);
  const std::string data_dir =
      options.data_dir.empty() ? std::string(data::kDefaultDataDirectory) : options.data_dir;
  const data::Dataset dataset =
      data::load_dataset(data_dir, options.train_limit, options.test_limit, options.data_options);
  check_data_shape(source.import.input_shape, dataset.train, data_dir);
  const torch::Tensor sample = first_pixels(dataset.test, 4);
  const OpCensus census = census_ops(*source.module, source.import, sample, source.path);
  const double original_acc = script_accuracy(*source.module, source, dataset.test);
  torch::jit::Module pruned = [&] {
    torch::NoGradGuard no_grad;  // the copied parameters are leaves
    return source.module->deepcopy();
  }();
  pruned.eval();
  const ScriptPruning pruning = prune_script_magnitude(pruned, options.sparsity);
  const double acc_before_tuning = script_accuracy(pruned, source, dataset.test);
  if (options.epochs > 0)
    fine_tune_script(pruned, source.import, dataset.train, options.epochs, options.learning_rate,
                     options.batch_size, options.seed, options.show_progress, pruning);
  const double pruned_acc = script_accuracy(pruned, source, dataset.test);
  const double removed =
      pruning.total_params > 0 ? static_cast<double>(pruning.zeroed) / pruning.total_params : 0.0;
  Json warnings = Json::array();
  if (!structured_refusal.empty())
    warnings.push_back("--structured: " + structured_refusal + "; pruned by magnitude instead");
  if (removed < 0.5 * options.sparsity) {
    char text[320];
    std::snprintf(
        text, sizeof text,
        "magnitude pruning zeroed %.2f%% of the parameters, far below --sparsity %g: most parameters "
        "are not weights of at least 2 dimensions (biases, norms, buffers stay dense)",
        removed * 100.0, options.sparsity);
    warnings.push_back(text);
  }
  save_script(pruned, options.out_path,
              output_info(source, "pruning",
                          {{"method", "magnitude"},
                           {"sparsity", options.sparsity},
                           {"test_acc", pruned_acc},
                           {"source", source.path},
                           {"data_dir", data_dir},
                           {"data_options", data::to_json(options.data_options)}}));
  const std::int64_t params = script_parameter_count(pruned);
  return {{"schema_version", kResultsSchemaVersion},
          {"kind", "prune"},
          {"threads", device::unplanned_threads_json()},
          {"model", source.path},
          {"method", "magnitude"},
          {"format", "torchscript"},
          {"dataset", data::to_json(dataset)},
          {"sparsity", options.sparsity},
          {"fine_tune_epochs", options.epochs},
          {"original_acc", original_acc},
          {"pruned_acc_before_fine_tune", acc_before_tuning},
          {"pruned_acc", pruned_acc},
          {"acc_drop_pt", (original_acc - pruned_acc) * 100.0},
          {"original_params", params},
          {"pruned_params", params},  // zeros are still stored: dense kernels, same size and MACs
          {"original_macs", census.macs_per_sample},
          {"pruned_macs", census.macs_per_sample},
          {"weight_sparsity", script_weight_sparsity(pruning)},
          {"pruned_tensors", pruning.names},
          {"removed_params_fraction", removed},
          {"warnings", warnings},
          {"out", options.out_path}};
}

}  // namespace ipj::quant
