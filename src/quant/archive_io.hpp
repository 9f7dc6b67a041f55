// Private to the quant module: writing an ipj model archive (program, int8, graph and int8 graph files) the
// one way they are all written (atomically, then sealed with its checksum, core/checked_file.hpp), and
// opening one the one way they are all read (checksum, load, format marker and version, metadata).
#pragma once

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <cstdint>
#include <string>

#include "ipj/core/json_io.hpp"

namespace ipj::quant {

// Throws ipj::Error(io) naming `path` when the archive cannot be written; `path` is untouched then.
void save_sealed_archive(torch::serialize::OutputArchive& archive, const std::string& path);

struct OpenedArchive {
  torch::serialize::InputArchive archive;  // the tensors are read from here by the format's loader
  Json meta;                               // the parsed "meta_json" entry
};
// Opens the ipj model archive at `path`: its checksum verified (a damaged file is refused; an unsealed one
// only loads, with a warning, when its format predates checksums: require_checksum_for_format), loaded, the
// integer entry `marker` (e.g. "ipj_program_format") in [1, `version`], and "meta_json" parsed. `what` names
// the kind in messages
// ("program file"). Throws ipj::Error(invalid_input) naming `path`, the marker or the version read.
OpenedArchive open_ipj_archive(const std::string& path, const std::string& marker, std::int64_t version,
                               const std::string& what);

}  // namespace ipj::quant
