// Reader for the IDX format of MNIST / Fashion-MNIST (unsigned-byte arrays only), gzip-compressed or plain.
// Validates magic, type code, dimensions and length; every error names the file and what is wrong.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ipj::data {

struct IdxArray {
  std::vector<std::int64_t> dims;    // e.g. [60000, 28, 28] for images, [60000] for labels
  std::vector<std::uint8_t> values;  // row-major, product(dims) bytes
};

// Reads `path` (".gz" or not: gzip is detected from the content). Throws ipj::Error(io) when unreadable and
// ipj::Error(invalid_input) for a wrong magic number, an unsupported type code, a truncated or oversized
// file, or a path that is not a regular file (a device, a FIFO). The size the header declares is checked
// against the file before any data is allocated (plain: its length; gzip: the 1032:1 deflate limit, the
// trailer's size and, for large data whose trailer disagrees, a counting pass that keeps nothing); inflation
// stops at the first byte past the declared size (bounded memory and time).
IdxArray read_idx_file(const std::string& path);
// Only the validated header's dimensions (reads 20 bytes at most): to check files against each other before
// any of them is loaded.
std::vector<std::int64_t> read_idx_dims(const std::string& path);

// Decompresses (if gzip) and returns the whole content of a file, stopping with ipj::Error(invalid_input) as
// soon as it exceeds `max_bytes`. Throws ipj::Error naming the file.
std::vector<std::uint8_t> read_maybe_gzip_file(const std::string& path,
                                               std::uint64_t max_bytes = std::uint64_t{1} << 34);

// Encodes an IDX ubyte array (used by tests and by tools that write subsets).
std::vector<std::uint8_t> encode_idx(const IdxArray& array);

}  // namespace ipj::data
