// One interface for every model ipj runs for inference: ipj checkpoints (fp32, bf16, frozen TorchScript, int8
// made on the fly), ipj int8/program/graph files, and any user TorchScript file (int8 through the graph IR).
// Inputs are [B, ...sample_shape] float; ipj's own models take pixels in [0, 1] and carry their
// normalisation, TorchScript models get --mean/--std.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ipj/data/data_options.hpp"
#include "ipj/data/data_record.hpp"
#include "ipj/infer/calibration.hpp"
#include "ipj/infer/fp32_engine.hpp"
#include "ipj/infer/variant.hpp"

namespace ipj::infer {

// How the error of a TorchScript model whose answer ipj cannot serve (a tuple, a dict, complex values)
// begins: the model ran on its input, so the input's shape is not the cause.
inline constexpr const char* kUnservableAnswer = "the TorchScript model returned ";
// Whether `message` is (or quotes) such an error.
inline bool is_unservable_answer(const std::string& message) {
  return message.find(kUnservableAnswer) != std::string::npos;
}

class InferenceModel {
 public:
  virtual ~InferenceModel() = default;
  // input: [B, ...sample_shape] float32 -> output [B, ...] float32. Thread-safe (no autograd, no state).
  virtual torch::Tensor forward(const torch::Tensor& input) const = 0;

  Variant variant = Variant::fp32;  // how it runs (never Variant::file once loaded)
  ModelFormat format = ModelFormat::ipj_checkpoint;
  std::string path;                        // the file loaded
  std::vector<std::int64_t> sample_shape;  // e.g. [1, 28, 28]; empty when unknown
  std::int64_t parameter_bytes = 0;        // weights as stored for this variant
  std::string model_name;                  // mlp, cnn, ... or the TorchScript class name
  std::string data_dir;                    // the data set an ipj model was trained on ("" if unknown)
  data::DataOptions data_options;          // how that data set was read (--resize, --channels, ...)
  // How an fp32 variant runs (eager or frozen) and why; empty for other variants.
  std::optional<Fp32EngineChoice> fp32_engine;
  // Batch-1 threads measured at load (fp32 with the auto engine, int8 variants with a known sample shape);
  // empty when not measured.
  std::optional<Batch1Threads> batch1_threads;
  // Static and QAT int8 variants with a known sample shape: their batch engine as measured at load.
  std::optional<Int8BatchEngine> int8_batch_engine;
  // What the file records about its training data (class and channel count, ...); unknown for files that
  // record nothing (TorchScript files not written by `ipj train`, older ipj files).
  data::DataRecord trained_data;
  // What the load did that a reader of the results must know (e.g. an int8 variant where nothing ran in
  // int8); `ipj bench` adds them to its warnings.
  std::vector<std::string> load_notes;
};
using InferenceModelPtr = std::shared_ptr<const InferenceModel>;

// What is loaded, separate from how it runs (as ONNX Runtime separates a session from its providers) and from
// the calibration images a static int8 variant needs (calibration.hpp).
struct ModelInputs {                      // how to feed a TorchScript file (ipj files record all of it)
  std::vector<std::int64_t> input_shape;  // the sample shape (needed for a TorchScript file's int8 variants)
  std::vector<float> mean;                // preprocessing: (x - mean) / std per channel
  std::vector<float> std;
};

struct RunOptions {
  Variant variant = Variant::file;  // file: the model as stored
  std::string engine = "auto";      // quantized engine for int8 variants and int8 files ("auto": the file's)
  Fp32Engine fp32_engine = Fp32Engine::auto_select;  // how fp32 runs (auto: the faster exact one, measured)
  std::int64_t fp32_engine_batch = 64;               // the batch size the engines are timed at besides 1
  bool batched_xnnpack = true;  // whether fp32_engine_batch may run on XNNPACK's runtime (fp32_engine.hpp)
  int pool_threads =
      0;  // the run's threads: batch 1 and XNNPACK's runtimes are timed on them; 0: the CPUs available
  // false: int8 models run on their own kernels on the pool, no route timed at load (a reference, as
  // Fp32Engine::eager is for fp32)
  bool int8_routes = true;
  // true: the run's thread plan may shrink while it runs (ipj serve without --threads): XNNPACK's batch
  // routes build a runtime for the fewer threads the first time a call comes on them (xnnpack_batch_route)
  bool replanned_threads = false;
  // joules: a faster form that costs more CPU per answer runs only within a bound of it (batch 1 on
  // XNNPACK's pool: kBatch1PoolMaxCpuRatio); latency: the fastest exact form (--prefer, config.json "prefer")
  Preference prefer = Preference::joules;
};

struct LoadOptions {
  ModelInputs inputs;
  RunOptions run;
  CalibrationSource calibration;  // read only by int8-static variants
};

// The variant names load_inference_model accepts besides "file".
const std::vector<std::string>& variant_names();

// Detects the file format and builds the requested variant. Throws ipj::Error: io (missing file),
// invalid_input (foreign or damaged file, shape mismatch), unsupported (variant impossible for this format),
// usage (unknown variant).
InferenceModelPtr load_inference_model(const std::string& path, const LoadOptions& options);
// With default LoadOptions (an overload, not a default argument: GCC 12 reports a false "may be used
// uninitialized" for the vectors of a temporary LoadOptions{} inlined into callers).
InferenceModelPtr load_inference_model(const std::string& path);

// "1,28,28" -> {1, 28, 28}; throws ipj::Error(usage) naming the flag on bad text, on a size above 2^20 and
// on more than 2^28 values per sample.
std::vector<std::int64_t> parse_shape(const std::string& text, const std::string& flag);

}  // namespace ipj::infer
