// `ipj quantize`: converts a trained model to int8 (dynamic, static PTQ with calibration, or QAT), measures
// fp32 vs int8 test accuracy and refuses to write a model whose accuracy drops more than max_drop_pt. ipj's
// mlp/cnn go through LayerProgram; ResNets, graph files and TorchScript files through the graph IR.
#pragma once

#include <cstdint>
#include <string>

#include "ipj/core/json_io.hpp"
#include "ipj/data/dataset.hpp"
#include "ipj/quant/layer_program.hpp"
#include "ipj/quant/observer.hpp"
#include "ipj/quant/quantized_program.hpp"
#include "ipj/quant/torchscript_import.hpp"

namespace ipj::quant {

// Static int8 of TorchScript files the graph importer refuses: keep only the int8 regions that pay for
// their quantize/dequantize borders (fast), or every supported region (all).
enum class Int8Regions { fast, all };
Int8Regions parse_int8_regions(const std::string& name);  // "fast" | "all"; else ipj::Error(usage)

struct QuantizeOptions {
  std::string model_path;  // ipj checkpoint, run folder, program/graph file or TorchScript file
  std::string out_path;    // where the int8 model goes (only when the guard passes)
  ImportOptions import;    // TorchScript files: --input-shape, --mean/--std
  QuantMode mode = QuantMode::static_ptq;
  std::string engine = "auto";
  ObserverKind observer = ObserverKind::minmax;
  double percentile = 99.99;
  std::int64_t calib_samples = 1000;  // training samples for calibration
  int qat_epochs = 1;
  double qat_learning_rate = 1e-3;
  std::int64_t batch_size = 128;
  double max_drop_pt = 0.5;  // the seeds' rule: at most 0.5 accuracy points lost
  std::string data_dir;      // empty: the data set the model was trained on
  // --resize/--channels/...: on top of the options the model was trained with.
  data::DataOptions data_options;
  std::int64_t test_limit = 0;
  std::int64_t train_limit = 0;  // qat: train on the first N training samples (0 = all)
  std::uint64_t seed = 0;
  bool show_progress = true;
  Int8Regions int8_regions = Int8Regions::fast;
};

struct QuantizeResult {
  double fp32_acc = 0.0;
  double int8_acc = 0.0;
  double acc_drop_pt = 0.0;
  std::int64_t fp32_bytes = 0;  // float weights + biases (BN folded)
  std::int64_t int8_bytes = 0;  // int8 weights + scales + float biases
  bool accepted = false;        // drop <= max_drop_pt
  bool written = false;
  std::string engine;
  Json report;  // the whole result object (what --json prints)
};

QuantizeResult run_quantize(const QuantizeOptions& options);

// Calibration: runs `samples` of `images` through the float program and returns one QuantParams per layer.
std::vector<QuantParams> calibrate(const LayerProgram& program, const data::ImageSet& images,
                                   std::int64_t samples, std::int64_t batch_size, ObserverKind observer,
                                   double percentile);

// Quantization-aware fine-tuning: fake-quant weights (per channel) and activations (EMA min-max) in the float
// program, SGD with momentum, `epochs` passes over `images`. Updates `program` and returns the activation
// params.
std::vector<QuantParams> quantization_aware_training(LayerProgram& program, const data::ImageSet& images,
                                                     int epochs, double learning_rate,
                                                     std::int64_t batch_size, std::uint64_t seed,
                                                     bool show_progress);

}  // namespace ipj::quant
