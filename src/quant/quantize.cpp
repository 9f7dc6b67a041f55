// The `ipj quantize` workflow: load, fold, calibrate or fine-tune, convert, evaluate both, guard, save.
#include "ipj/quant/quantize.hpp"

#include <torch/torch.h>

#include <chrono>
#include <cmath>

#include "ipj/core/error.hpp"
#include "ipj/core/log.hpp"
#include "ipj/quant/prune.hpp"
#include "ipj/train/evaluate.hpp"

namespace ipj::quant {

QuantizeResult run_quantize(const QuantizeOptions& options) {
  if (!(options.max_drop_pt >= 0.0 && options.max_drop_pt <= 100.0))  // NaN fails too
    fail(ErrorCategory::usage, "--max-drop must be in 0..100 accuracy points");
  if (!(options.percentile > 0.0 && options.percentile <= 100.0))
    fail(ErrorCategory::usage, "--percentile must be in (0, 100]");
  if (!(options.qat_learning_rate > 0.0 && options.qat_learning_rate <= 100.0))
    fail(ErrorCategory::usage, "--lr must be a positive number up to 100");
  if (options.calib_samples <= 0) fail(ErrorCategory::usage, "--calib must be a positive number of samples");
  if (options.out_path.empty()) fail(ErrorCategory::usage, "--out FILE is required");
  const auto start = std::chrono::steady_clock::now();
  SourceProgram source = load_source_program(options.model_path);
  LayerProgram& program = source.program;
  const std::string data_dir = options.data_dir.empty() ? source.data_dir : options.data_dir;
  const bool needs_training_set = options.mode == QuantMode::qat;
  const data::Dataset dataset =
      data::load_dataset(data_dir, needs_training_set ? 0 : options.calib_samples, options.test_limit);
  const auto& shape = program.input_shape;
  if (dataset.train.channels != shape[0] || dataset.train.height != shape[1] ||
      dataset.train.width != shape[2])
    fail(ErrorCategory::invalid_input,
         "data set '" + data_dir + "' has images of another shape than the model's");

  QuantizeResult result;
  result.fp32_acc =
      train::pixel_accuracy([&](const torch::Tensor& x) { return run_float(program, x); }, dataset.test, 256);
  result.fp32_bytes = float_parameter_bytes(program);

  std::vector<QuantParams> activation_params;
  if (options.mode == QuantMode::static_ptq) {
    activation_params = calibrate(program, dataset.train, options.calib_samples, options.batch_size,
                                  options.observer, options.percentile);
  } else if (options.mode == QuantMode::qat) {
    if (options.qat_epochs < 1) fail(ErrorCategory::usage, "--epochs must be >= 1 for --mode qat");
    activation_params =
        quantization_aware_training(program, dataset.train, options.qat_epochs, options.qat_learning_rate,
                                    options.batch_size, options.seed, options.show_progress);
  }
  const QuantizedProgram quantized =
      QuantizedProgram::convert(program, options.mode, activation_params, options.engine);
  result.engine = quantized.engine();
  result.int8_acc =
      train::pixel_accuracy([&](const torch::Tensor& x) { return quantized.forward(x); }, dataset.test, 256);
  result.int8_bytes = quantized.parameter_bytes();
  result.acc_drop_pt = (result.fp32_acc - result.int8_acc) * 100.0;
  // A drop within rounding of the limit passes: accuracies are ratios of integer counts.
  result.accepted = result.acc_drop_pt <= options.max_drop_pt + 1e-9;

  Json extra = {{"fp32_acc", result.fp32_acc},
                {"int8_acc", result.int8_acc},
                {"source_checkpoint", source.path},
                {"data_dir", data_dir},
                {"calib_samples", options.calib_samples},
                {"observer", options.observer == ObserverKind::minmax ? "minmax" : "percentile"}};
  if (result.accepted) {
    quantized.save(options.out_path, extra);
    result.written = true;
  }
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Json& report = result.report;
  report["schema_version"] = kResultsSchemaVersion;
  report["kind"] = "quantize";
  report["model"] = source.path;
  report["model_name"] = program.model_name;
  report["mode"] = quant_mode_name(options.mode);
  report["engine"] = result.engine;
  report["observer"] = extra["observer"];
  report["calib_samples"] =
      options.mode == QuantMode::static_ptq ? Json(options.calib_samples) : Json(nullptr);
  report["qat_epochs"] = options.mode == QuantMode::qat ? Json(options.qat_epochs) : Json(nullptr);
  report["test_samples"] = dataset.test.count;
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
  return result;
}

}  // namespace ipj::quant
