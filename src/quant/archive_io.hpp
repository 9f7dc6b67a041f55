// Private to the quant module: writing an ipj model archive (program, int8, graph and int8 graph files) the
// one way they are all written: atomically, then sealed with its checksum (core/checked_file.hpp).
#pragma once

#include <torch/serialize/output-archive.h>

#include <string>

namespace ipj::quant {

// Throws ipj::Error(io) naming `path` when the archive cannot be written; `path` is untouched then.
void save_sealed_archive(torch::serialize::OutputArchive& archive, const std::string& path);

}  // namespace ipj::quant
