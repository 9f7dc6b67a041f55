// Parsing --model into a zoo name or a TorchScript file, short names, and file fingerprints (XXH3-64).
#include "ipj/models/model_source.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "ipj/core/error.hpp"
#include "ipj/models/catalog.hpp"

namespace ipj::models {

ModelSource ModelSource::torchscript(std::string path, std::vector<std::int64_t> input_shape) {
  ModelSource source;
  source.origin = ModelOrigin::torchscript_file;
  source.zoo_name.clear();
  source.file = std::move(path);
  source.input_shape = std::move(input_shape);
  return source;
}

ModelSource parse_model_source(const std::string& text, const std::vector<std::int64_t>& input_shape,
                               const std::string& flag) {
  std::string zoo_names;
  for (const auto& entry : model_catalog()) {
    if (entry.name == text) {
      if (!input_shape.empty())
        fail(ErrorCategory::usage, "--input-shape is for TorchScript files given to " + flag +
                                       "; the zoo model '" + text +
                                       "' takes the data set's images as they are (drop --input-shape)");
      return ModelSource(text);
    }
    zoo_names += (zoo_names.empty() ? "" : ", ") + entry.name;
  }
  const bool looks_like_path = text.find('/') != std::string::npos || text.find('.') != std::string::npos;
  if (std::filesystem::exists(text) || looks_like_path) {
    if (!std::filesystem::exists(text))
      fail(ErrorCategory::io,
           flag + ": no model file at '" + text +
               "'; give a TorchScript file saved by torch.jit.script(model).save(PATH) or a "
               "zoo model (" +
               zoo_names + ")");
    return ModelSource::torchscript(text, input_shape);
  }
  fail(ErrorCategory::usage, flag + ": unknown model '" + text + "' (zoo: " + zoo_names +
                                 "; or the path of a TorchScript file, e.g. ./" + text + ".pt)");
}

std::string short_name(const ModelSource& source) {
  if (!source.is_file()) return source.zoo_name;
  const std::string stem = std::filesystem::path(source.file).stem().string();
  return stem.empty() ? "model" : stem;
}

FileFingerprint fingerprint_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorCategory::io, "cannot read '" + path + "' (to fingerprint it)");
  const std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), &XXH3_freeState);
  XXH3_64bits_reset(state.get());
  std::vector<char> chunk(1 << 20);
  FileFingerprint fingerprint;
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    const std::streamsize got = in.gcount();
    if (got <= 0) break;
    XXH3_64bits_update(state.get(), chunk.data(), static_cast<std::size_t>(got));
    fingerprint.bytes += got;
  }
  if (in.bad()) fail(ErrorCategory::io, "error while reading '" + path + "' (to fingerprint it)");
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(XXH3_64bits_digest(state.get())));
  fingerprint.xxh3_64 = hex;
  return fingerprint;
}

}  // namespace ipj::models
