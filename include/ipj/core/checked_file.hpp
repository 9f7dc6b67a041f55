// Checked files: an xxHash64 checksum sealed into every archive and results file ipj writes, verified on
// load, so that a damaged file is refused naming it instead of loading silently. LibTorch-free
// (docs/RESULTS.md). Limits: a checksum detects damage, not tampering (anyone can recompute it); archives
// without one load only when their format version predates checksums.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <string_view>

#include "ipj/core/json_io.hpp"

namespace ipj {

// xxHash64 (seed 0) of `bytes` as 16 lowercase hex digits, as `xxhsum -H1` prints it.
std::string xxh64_hex(std::string_view bytes);

enum class ChecksumStatus {
  verified,  // the file carries an ipj checksum and it matches
  absent,    // the file carries none (written by an older ipj, or by another tool)
};

// Zip archives (LibTorch archives: checkpoints, int8 and program files). The checksum is the archive's zip
// comment, "ipj-xxh64:" + 16 hex digits of the hash of every byte before those digits: a valid zip that
// LibTorch, torch.jit.load and Python's zipfile read as before. `seal_zip_archive` appends it to a freshly
// written archive (throws Error(io) when `path` is not a zip without a comment).
void seal_zip_archive(const std::string& path);
// Throws Error(invalid_input) naming `path` when the checksum does not match or the end of the archive is
// damaged; Error(io) when it cannot be read.
ChecksumStatus verify_zip_archive(const std::string& path);

// The first format version of every ipj archive kind (checkpoint, int8, program, graph, int8 graph files)
// that ipj always seals: format 1 files were written both before and after checksums existed, format 2 ones
// only with one. Format 2 has the same layout as format 1.
inline constexpr std::int64_t kFirstSealedArchiveFormat = 2;

// For an ipj archive (`what`, e.g. "checkpoint") whose checksum verify_zip_archive found in `status` and
// whose format version the loader then read: a verified file passes; an unsealed one passes, with a warning
// naming it, only when `format` predates checksums (< kFirstSealedArchiveFormat) -- LibTorch's per-entry CRC
// checks the rest --; any other unsealed file is Error(invalid_input) naming it (its checksum was stripped or
// lost: a damaged file).
void require_checksum_for_format(const std::string& path, const std::string& what, ChecksumStatus status,
                                 std::int64_t format);

// Called in a catch (...) block around code that reads `path`: rethrows an ipj::Error as it is and turns any
// other exception (LibTorch's c10::Error, a JSON error, bad_alloc from a damaged size) into
// Error(invalid_input) naming the file and `what` it should be. Loaders use it in a function-try-block.
[[noreturn]] void rethrow_as_load_error(const std::string& path, const std::string& what);
// Runs `load` (which reads `path`) with the same translation.
void load_file_checked(const std::string& path, const std::string& what, const std::function<void()>& load);

// Results files: `seal_json_text` renders an object (pretty-printed, trailing newline) with a last key
// "checksum": "xxh64:<16 hex>" over the whole text with those digits as zeros. `verify_json_text` checks it
// and removes the key; a text without "checksum" is accepted (absent). Non-objects are written unsealed.
std::string seal_json_text(const Json& value);
ChecksumStatus verify_json_text(const std::string& path, const std::string& text, Json& value);

}  // namespace ipj
