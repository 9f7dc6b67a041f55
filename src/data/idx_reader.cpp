// IDX parsing with zlib for .gz; strict validation so that a corrupt download fails loudly, never silently.
#include "ipj/data/idx_reader.hpp"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "ipj/core/error.hpp"

namespace ipj::data {
namespace {

constexpr std::uint8_t kUnsignedByteType = 0x08;
constexpr std::int64_t kMaxElements = std::int64_t{1} << 34;  // 16 GiB of bytes: anything larger is corrupt

std::uint32_t read_big_endian_u32(const std::uint8_t* bytes) {
  return (std::uint32_t{bytes[0]} << 24) | (std::uint32_t{bytes[1]} << 16) | (std::uint32_t{bytes[2]} << 8) |
         std::uint32_t{bytes[3]};
}

}  // namespace

std::vector<std::uint8_t> read_maybe_gzip_file(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");  // gzread passes uncompressed files through unchanged
  if (file == nullptr) fail(ErrorCategory::io, "cannot open '" + path + "': " + std::strerror(errno));
  std::vector<std::uint8_t> content;
  std::uint8_t chunk[1 << 16];
  while (true) {
    const int got = gzread(file, chunk, sizeof chunk);
    if (got < 0) {
      int code = 0;
      const std::string message = gzerror(file, &code);
      gzclose(file);
      fail(code == Z_ERRNO ? ErrorCategory::io : ErrorCategory::invalid_input,
           "'" + path + "' is corrupt or truncated (gzip: " + message + "); re-download or regenerate it");
    }
    if (got == 0) break;
    content.insert(content.end(), chunk, chunk + got);
  }
  // zlib reports a gzip stream cut short only through gzerror after EOF (Z_BUF_ERROR).
  int code = 0;
  const std::string message = gzerror(file, &code);
  gzclose(file);
  if (code != Z_OK && code != Z_STREAM_END) {
    fail(ErrorCategory::invalid_input,
         "'" + path + "' is truncated or corrupt (gzip: " + message + "); re-download or regenerate it");
  }
  return content;
}

IdxArray read_idx_file(const std::string& path) {
  const std::vector<std::uint8_t> content = read_maybe_gzip_file(path);
  if (content.size() < 4) {
    fail(ErrorCategory::invalid_input, "'" + path +
                                           "' is not an IDX file: " + std::to_string(content.size()) +
                                           " bytes, too short for the 4-byte magic number");
  }
  if (content[0] != 0 || content[1] != 0) {
    char magic[16];
    std::snprintf(magic, sizeof magic, "0x%08x", read_big_endian_u32(content.data()));
    fail(ErrorCategory::invalid_input, "'" + path + "' is not an IDX file: wrong magic number " + magic +
                                           " (expected 0x0000TTNN: two zero bytes, type, dimension count)");
  }
  if (content[2] != kUnsignedByteType) {
    char type[8];
    std::snprintf(type, sizeof type, "0x%02x", content[2]);
    fail(ErrorCategory::invalid_input, "'" + path + "': IDX type code " + type +
                                           " is not supported (ipj reads unsigned-byte arrays, type 0x08)");
  }
  const int dimension_count = content[3];
  if (dimension_count < 1 || dimension_count > 4) {
    fail(ErrorCategory::invalid_input, "'" + path + "': IDX dimension count " +
                                           std::to_string(dimension_count) + " is out of range (1..4)");
  }
  const size_t header_bytes = 4 + 4 * static_cast<size_t>(dimension_count);
  if (content.size() < header_bytes) {
    fail(ErrorCategory::invalid_input, "'" + path + "' is truncated: header needs " +
                                           std::to_string(header_bytes) + " bytes, file has " +
                                           std::to_string(content.size()));
  }
  IdxArray array;
  std::int64_t element_count = 1;
  for (int dimension = 0; dimension < dimension_count; ++dimension) {
    const std::int64_t size = read_big_endian_u32(content.data() + 4 + 4 * dimension);
    if (size == 0) {
      fail(ErrorCategory::invalid_input,
           "'" + path + "': dimension " + std::to_string(dimension) + " has size 0 (an empty data set)");
    }
    element_count *= size;
    if (element_count > kMaxElements) {
      fail(ErrorCategory::invalid_input,
           "'" + path + "': dimensions describe more than 2^34 elements; corrupt header");
    }
    array.dims.push_back(size);
  }
  const size_t payload = content.size() - header_bytes;
  if (payload < static_cast<size_t>(element_count)) {
    fail(ErrorCategory::invalid_input, "'" + path + "' is truncated: header promises " +
                                           std::to_string(element_count) + " bytes of data, file has " +
                                           std::to_string(payload) + "; re-download it");
  }
  if (payload > static_cast<size_t>(element_count)) {
    fail(ErrorCategory::invalid_input,
         "'" + path + "' has " + std::to_string(payload - element_count) +
             " unexpected bytes after the data; the header or the file is corrupt");
  }
  array.values.assign(content.begin() + static_cast<std::ptrdiff_t>(header_bytes), content.end());
  return array;
}

std::vector<std::uint8_t> encode_idx(const IdxArray& array) {
  std::vector<std::uint8_t> bytes{0, 0, kUnsignedByteType, static_cast<std::uint8_t>(array.dims.size())};
  for (std::int64_t size : array.dims) {
    const auto value = static_cast<std::uint32_t>(size);
    bytes.push_back(static_cast<std::uint8_t>(value >> 24));
    bytes.push_back(static_cast<std::uint8_t>(value >> 16));
    bytes.push_back(static_cast<std::uint8_t>(value >> 8));
    bytes.push_back(static_cast<std::uint8_t>(value));
  }
  bytes.insert(bytes.end(), array.values.begin(), array.values.end());
  return bytes;
}

}  // namespace ipj::data
