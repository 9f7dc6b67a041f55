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
// file. Inflation stops at the first byte past the size the header declares (bounded memory and time).
IdxArray read_idx_file(const std::string& path);

// Decompresses (if gzip) and returns the whole content of a file, stopping with ipj::Error(invalid_input) as
// soon as it exceeds `max_bytes`. Throws ipj::Error naming the file.
std::vector<std::uint8_t> read_maybe_gzip_file(const std::string& path,
                                               std::uint64_t max_bytes = std::uint64_t{1} << 34);

// Encodes an IDX ubyte array (used by tests and by tools that write subsets).
std::vector<std::uint8_t> encode_idx(const IdxArray& array);

}  // namespace ipj::data
