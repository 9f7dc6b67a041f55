// Where a model to train comes from: ipj's zoo (a registry name) or a user's TorchScript file (scripted or
// traced by Python's torch.jit). Parsed once at the boundary (CLI flags, JSON) into this choice.
// LibTorch-free: the CLI and TrainConfig use it without LibTorch headers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ipj::models {

enum class ModelOrigin { zoo, torchscript_file };

struct ModelSource {
  ModelOrigin origin = ModelOrigin::zoo;
  std::string zoo_name = "mlp";  // origin zoo: a name from models/catalog.hpp
  std::string file;              // origin torchscript_file: the path as given
  // origin torchscript_file: what the module's forward takes per sample, {C, H, W} or one flat size {N}
  // (batches are reshaped to [B, N]); empty = the data set's images as they are ([B, C, H, W]).
  std::vector<std::int64_t> input_shape;

  ModelSource() = default;
  // A zoo model: `config.model = "cnn"` keeps meaning the registry's cnn (validated where it is used).
  ModelSource(std::string zoo) : zoo_name(std::move(zoo)) {}  // NOLINT(google-explicit-constructor)
  ModelSource(const char* zoo) : zoo_name(zoo) {}             // NOLINT(google-explicit-constructor)
  static ModelSource torchscript(std::string path, std::vector<std::int64_t> input_shape = {});

  bool is_file() const { return origin == ModelOrigin::torchscript_file; }
  // The zoo name, or the file path as given (what results and tables show).
  const std::string& label() const { return is_file() ? file : zoo_name; }
};

// `--model TEXT` with `--input-shape` (empty when not given): a zoo name wins; otherwise TEXT is a
// TorchScript file. Throws ipj::Error: usage for an unknown name that is not a file path (listing the zoo),
// or --input-shape with a zoo model; io when TEXT looks like a file (has a '/' or a '.') but does not exist.
ModelSource parse_model_source(const std::string& text, const std::vector<std::int64_t>& input_shape,
                               const std::string& flag = "--model");

// A short name for run folders: "cnn", or the file's stem ("my_net" for models/my_net.pt).
std::string short_name(const ModelSource& source);

// Whether convolutions dominate the model (thread plan, channels-last in the optimized recipe): the
// catalog's flag for zoo models, any 4-D parameter for files (loads the file).
bool is_convolutional(const ModelSource& source);

// Identity of a model file for --resume: size and XXH3-64 hash of its bytes. Throws ipj::Error(io).
struct FileFingerprint {
  std::int64_t bytes = 0;
  std::string xxh3_64;  // 16 lowercase hex digits
};
FileFingerprint fingerprint_file(const std::string& path);

}  // namespace ipj::models
