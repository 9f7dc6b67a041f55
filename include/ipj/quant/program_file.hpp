// Float LayerPrograms on disk ("ipj-program" files): what `ipj prune` writes. Loadable by `ipj bench`, `ipj
// serve` and `ipj quantize` like checkpoints; one LibTorch archive, written atomically.
#pragma once

#include <string>

#include "ipj/core/json_io.hpp"
#include "ipj/quant/layer_program.hpp"

namespace ipj::quant {

// 2: the layout of 1, always sealed with a checksum (core/checked_file.hpp); format 1 files are still read.
inline constexpr int kProgramFormatVersion = 2;

struct ProgramFile {
  LayerProgram program;
  Json extra;  // provenance: source checkpoint, data set, accuracy, pruning settings
};

void save_program(const std::string& path, const LayerProgram& program, const Json& extra);
// Throws ipj::Error(invalid_input) when `path` is not an ipj program file.
ProgramFile load_program(const std::string& path);
bool is_program_file(const std::string& path);

// Layer metadata shared with the int8 format: kind, relu, stride, padding, pool.
Json layer_metadata(const Layer& layer);
Layer layer_from_metadata(const Json& entry);

}  // namespace ipj::quant
