// How a loaded model runs (its variant) and what kind of file it came from (its format), as enums: text
// becomes a Variant once where it enters (ipj bench's --variants, a served model's config) and is spelt
// back only in JSON, tables and messages (choice_name). LibTorch-free.
#pragma once

#include <array>
#include <string>
#include <utility>

#include "ipj/core/choice.hpp"

namespace ipj::infer {

enum class Variant {
  file,  // as stored: fp32 for float files, the file's own int8 mode for int8 files (only in LoadOptions)
  fp32,
  bf16,
  jit,  // frozen, optimised TorchScript
  int8_dynamic,
  int8_static,
  int8_qat,  // only a file `ipj quantize --mode qat` wrote
};

// The inference-facing format; int8 program and int8 graph files are both ipj-int8.
enum class ModelFormat { ipj_checkpoint, ipj_int8, ipj_program, ipj_graph, torchscript };

bool is_int8(Variant variant);

// The variant an int8 file stores, from quant_mode_name's spelling ("dynamic" -> int8-dynamic). Throws
// ipj::Error(invalid_input) naming `where` for another spelling.
Variant stored_int8_variant(const std::string& mode, const std::string& where);

// Parses a variant name ("file" or one of variant_names()). Throws ipj::Error(usage) "[<setting>: ]unknown
// variant '<text>': use file, fp32, ...".
Variant parse_variant(const std::string& text, const std::string& setting = "");

}  // namespace ipj::infer

namespace ipj {

template <>
struct ChoiceNames<infer::Variant> {
  static constexpr std::array<std::pair<infer::Variant, const char*>, 7> names{
      {{infer::Variant::file, "file"},
       {infer::Variant::fp32, "fp32"},
       {infer::Variant::bf16, "bf16"},
       {infer::Variant::jit, "jit"},
       {infer::Variant::int8_dynamic, "int8-dynamic"},
       {infer::Variant::int8_static, "int8-static"},
       {infer::Variant::int8_qat, "int8-qat"}}};
};

template <>
struct ChoiceNames<infer::ModelFormat> {
  static constexpr std::array<std::pair<infer::ModelFormat, const char*>, 5> names{
      {{infer::ModelFormat::ipj_checkpoint, "ipj-checkpoint"},
       {infer::ModelFormat::ipj_int8, "ipj-int8"},
       {infer::ModelFormat::ipj_program, "ipj-program"},
       {infer::ModelFormat::ipj_graph, "ipj-graph"},
       {infer::ModelFormat::torchscript, "torchscript"}}};
};

}  // namespace ipj
