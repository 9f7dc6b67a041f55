// IDX parsing with zlib for .gz, inflated as a stream that stops at the size the header declares (a gzip bomb
// fails fast with bounded memory), the declared size checked against the file before any data is allocated (a
// header larger than its data fails fast); strict validation so that a corrupt download fails loudly.
#include "ipj/data/idx_reader.hpp"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>

#include "ipj/core/atomic_file.hpp"
#include "ipj/core/error.hpp"

namespace ipj::data {
namespace {

constexpr std::uint8_t kUnsignedByteType = 0x08;
constexpr std::int64_t kMaxElements = std::int64_t{1} << 34;  // 16 GiB of bytes: anything larger is corrupt

std::uint32_t read_big_endian_u32(const std::uint8_t* bytes) {
  return (std::uint32_t{bytes[0]} << 24) | (std::uint32_t{bytes[1]} << 16) | (std::uint32_t{bytes[2]} << 8) |
         std::uint32_t{bytes[3]};
}

// A gzip or plain file read as a stream; every error names the file.
class GzipStream {
 public:
  explicit GzipStream(const std::string& path) : path_(path), file_(gzopen(path.c_str(), "rb")) {
    // gzread passes uncompressed files through unchanged
    if (file_ == nullptr) fail(ErrorCategory::io, "cannot open '" + path + "': " + std::strerror(errno));
  }
  ~GzipStream() { gzclose(file_); }
  GzipStream(const GzipStream&) = delete;
  GzipStream& operator=(const GzipStream&) = delete;

  // Reads up to `count` bytes (fewer only at the end of the data); throws on a corrupt stream.
  std::size_t read(std::uint8_t* destination, std::size_t count) {
    std::size_t done = 0;
    while (done < count) {
      const unsigned int ask = static_cast<unsigned int>(std::min<std::size_t>(count - done, 1u << 30));
      const int got = gzread(file_, destination + done, ask);
      if (got < 0) {
        int code = 0;
        const std::string message = gzerror(file_, &code);
        fail(code == Z_ERRNO ? ErrorCategory::io : ErrorCategory::invalid_input,
             "'" + path_ + "' is corrupt or truncated (gzip: " + message + "); re-download or regenerate it");
      }
      if (got == 0) break;
      done += static_cast<std::size_t>(got);
    }
    return done;
  }
  // After the end of the data: zlib reports a gzip stream cut short only through gzerror (Z_BUF_ERROR).
  void require_complete_stream() {
    int code = 0;
    const std::string message = gzerror(file_, &code);
    if (code != Z_OK && code != Z_STREAM_END)
      fail(ErrorCategory::invalid_input,
           "'" + path_ + "' is truncated or corrupt (gzip: " + message + "); re-download or regenerate it");
  }

 private:
  std::string path_;
  gzFile file_;
};

// Reads exactly `count` bytes into `values`, growing it as data arrives (a header promising much more than
// the file holds allocates no more than the file holds), then checks that nothing follows: inflation stops
// at the first byte past `count`, so a gzip bomb costs at most `count` bytes of memory and the time to
// inflate them.
void read_payload(GzipStream& stream, const std::string& path, std::int64_t count,
                  std::vector<std::uint8_t>& values) {
  const auto expected = static_cast<std::size_t>(count);
  std::size_t filled = 0;
  values.resize(std::min<std::size_t>(expected, std::size_t{1} << 20));
  while (filled < expected) {
    if (filled == values.size()) values.resize(std::min(expected, values.size() * 2));
    const std::size_t got = stream.read(values.data() + filled, values.size() - filled);
    filled += got;
    if (got == 0) break;
  }
  if (filled < expected) {
    stream.require_complete_stream();
    fail(ErrorCategory::invalid_input, "'" + path + "' is truncated: header promises " +
                                           std::to_string(count) + " bytes of data, file has " +
                                           std::to_string(filled) + "; re-download it");
  }
  std::uint8_t extra[4096];
  const std::size_t trailing = stream.read(extra, sizeof extra);
  if (trailing > 0) {
    fail(ErrorCategory::invalid_input,
         "'" + path + "' has unexpected bytes after the " + std::to_string(count) +
             " bytes of data its header declares (at least " + std::to_string(trailing) +
             "); the header or the file is corrupt (reading stopped there)");
  }
  stream.require_complete_stream();
}

std::uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page_size <= 0) return std::numeric_limits<std::uint64_t>::max();
  return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page_size);
}

struct IdxHeader {
  std::vector<std::int64_t> dims;
  std::int64_t element_count = 1;  // bytes of data (unsigned-byte arrays)
  std::uint64_t header_bytes = 0;
};

IdxHeader read_header(GzipStream& stream, const std::string& path) {
  std::uint8_t header[4 + 4 * 4];
  const std::size_t magic_bytes = stream.read(header, 4);
  if (magic_bytes < 4) {
    stream.require_complete_stream();
    fail(ErrorCategory::invalid_input, "'" + path + "' is not an IDX file: " + std::to_string(magic_bytes) +
                                           " bytes, too short for the 4-byte magic number");
  }
  if (header[0] != 0 || header[1] != 0) {
    char magic[16];
    std::snprintf(magic, sizeof magic, "0x%08x", read_big_endian_u32(header));
    fail(ErrorCategory::invalid_input, "'" + path + "' is not an IDX file: wrong magic number " + magic +
                                           " (expected 0x0000TTNN: two zero bytes, type, dimension count)");
  }
  if (header[2] != kUnsignedByteType) {
    char type[8];
    std::snprintf(type, sizeof type, "0x%02x", header[2]);
    fail(ErrorCategory::invalid_input, "'" + path + "': IDX type code " + type +
                                           " is not supported (ipj reads unsigned-byte arrays, type 0x08)");
  }
  const int dimension_count = header[3];
  if (dimension_count < 1 || dimension_count > 4) {
    fail(ErrorCategory::invalid_input, "'" + path + "': IDX dimension count " +
                                           std::to_string(dimension_count) + " is out of range (1..4)");
  }
  IdxHeader result;
  result.header_bytes = 4 + 4 * static_cast<std::uint64_t>(dimension_count);
  const std::size_t size_bytes = stream.read(header + 4, result.header_bytes - 4);
  if (size_bytes < result.header_bytes - 4) {
    stream.require_complete_stream();
    fail(ErrorCategory::invalid_input, "'" + path + "' is truncated: header needs " +
                                           std::to_string(result.header_bytes) + " bytes, file has " +
                                           std::to_string(4 + size_bytes));
  }
  for (int dimension = 0; dimension < dimension_count; ++dimension) {
    const std::int64_t size = read_big_endian_u32(header + 4 + 4 * dimension);
    if (size == 0) {
      fail(ErrorCategory::invalid_input,
           "'" + path + "': dimension " + std::to_string(dimension) + " has size 0 (an empty data set)");
    }
    result.element_count *= size;
    if (result.element_count > kMaxElements) {
      fail(ErrorCategory::invalid_input,
           "'" + path + "': dimensions describe more than 2^34 elements; corrupt header");
    }
    result.dims.push_back(size);
  }
  if (static_cast<std::uint64_t>(result.element_count) > physical_memory_bytes()) {
    fail(ErrorCategory::invalid_input,
         "'" + path + "': its header declares " + std::to_string(result.element_count) +
             " bytes of data, more than this machine's memory; corrupt header?");
  }
  return result;
}

// What the file itself says about its size: its length on disk, whether it is gzip, and the gzip trailer's
// ISIZE (the inflated length of the last member, modulo 2^32).
struct RawFacts {
  std::uint64_t file_bytes = 0;
  bool gzip = false;
  std::uint32_t trailer_size = 0;
};

RawFacts raw_facts(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorCategory::io, "cannot open '" + path + "': " + std::strerror(errno));
  RawFacts facts;
  in.seekg(0, std::ios::end);
  facts.file_bytes = static_cast<std::uint64_t>(in.tellg());
  unsigned char bytes[4] = {0, 0, 0, 0};
  in.seekg(0);
  in.read(reinterpret_cast<char*>(bytes), 2);
  facts.gzip = in.gcount() == 2 && bytes[0] == 0x1f && bytes[1] == 0x8b;
  if (facts.gzip && facts.file_bytes >= 4) {
    in.seekg(static_cast<std::streamoff>(facts.file_bytes - 4));
    in.read(reinterpret_cast<char*>(bytes), 4);
    facts.trailer_size = std::uint32_t{bytes[0]} | (std::uint32_t{bytes[1]} << 8) |
                         (std::uint32_t{bytes[2]} << 16) | (std::uint32_t{bytes[3]} << 24);
  }
  return facts;
}

// `has`: what the file holds after the header, in words ("3145728", "at most ...").
[[noreturn]] void fail_size_mismatch(const std::string& path, const IdxHeader& header,
                                     std::uint64_t data_bytes, const std::string& has) {
  const auto declared = static_cast<std::uint64_t>(header.element_count);
  if (data_bytes < declared)
    fail(ErrorCategory::invalid_input, "'" + path + "' is truncated: header promises " +
                                           std::to_string(declared) + " bytes of data, file has " + has +
                                           "; re-download or regenerate it (nothing was loaded)");
  fail(ErrorCategory::invalid_input, "'" + path + "' has unexpected bytes after the " +
                                         std::to_string(declared) + " bytes of data its header declares (" +
                                         has + "); the header or the file is corrupt (nothing was loaded)");
}

// Inflates the whole file into a small buffer, counting bytes and keeping none, stopping at `stop_at` bytes:
// the real size of the data, known in bounded memory before anything is allocated for it.
std::uint64_t count_inflated_bytes(const std::string& path, std::uint64_t stop_at) {
  GzipStream stream(path);
  std::vector<std::uint8_t> chunk(std::size_t{1} << 18);
  std::uint64_t total = 0;
  while (total < stop_at) {
    const std::size_t got = stream.read(chunk.data(), chunk.size());
    if (got == 0) break;
    total += got;
  }
  if (total < stop_at) stream.require_complete_stream();
  return total;
}

// Checks the data size the header declares against the file before any of it is allocated: a plain file by
// its length; a gzip file by deflate's largest ratio (1032:1), then by its trailer's ISIZE, and, when that
// disagrees (a damaged header, or a file of several gzip members) and the declared size is large, by
// inflating it once without keeping the data. A header larger than its data fails here in bounded memory.
void check_declared_size(const std::string& path, const IdxHeader& header) {
  const RawFacts facts = raw_facts(path);
  const auto declared = static_cast<std::uint64_t>(header.element_count);
  if (!facts.gzip) {
    const std::uint64_t data_bytes = facts.file_bytes - std::min(facts.file_bytes, header.header_bytes);
    if (data_bytes != declared) fail_size_mismatch(path, header, data_bytes, std::to_string(data_bytes));
    return;
  }
  constexpr std::uint64_t kMaxDeflateRatio = 1032;
  if (declared > facts.file_bytes * kMaxDeflateRatio)
    fail_size_mismatch(path, header, facts.file_bytes * kMaxDeflateRatio,
                       "at most " + std::to_string(facts.file_bytes * kMaxDeflateRatio) + " (" +
                           std::to_string(facts.file_bytes) + " bytes of gzip inflate at most 1032:1)");
  const std::uint64_t total = header.header_bytes + declared;
  constexpr std::uint64_t kCountAbove = std::uint64_t{64} << 20;  // smaller: reading it is as cheap
  if (facts.trailer_size == static_cast<std::uint32_t>(total) || declared <= kCountAbove) return;
  const std::uint64_t inflated = count_inflated_bytes(path, total + 1);
  const std::uint64_t data_bytes = inflated - std::min(inflated, header.header_bytes);
  if (inflated != total)
    fail_size_mismatch(path, header, data_bytes,
                       inflated > total ? "at least " + std::to_string(data_bytes)
                                        : std::to_string(data_bytes) + " (counted by inflating it)");
}

}  // namespace

std::vector<std::uint8_t> read_maybe_gzip_file(const std::string& path, std::uint64_t max_bytes) {
  GzipStream stream(path);
  std::vector<std::uint8_t> content;
  std::uint8_t chunk[1 << 16];
  while (const std::size_t got = stream.read(chunk, sizeof chunk)) {
    if (content.size() + got > max_bytes)
      fail(ErrorCategory::invalid_input, "'" + path + "' holds more than " + std::to_string(max_bytes) +
                                             " bytes (uncompressed); reading stopped there");
    content.insert(content.end(), chunk, chunk + got);
  }
  stream.require_complete_stream();
  return content;
}

IdxArray read_idx_file(const std::string& path) {
  require_regular_file(path);  // not a device (/dev/zero) or a FIFO
  GzipStream stream(path);
  IdxArray array;
  const IdxHeader header = read_header(stream, path);
  array.dims = header.dims;
  check_declared_size(path, header);
  read_payload(stream, path, header.element_count, array.values);
  return array;
}

std::vector<std::int64_t> read_idx_dims(const std::string& path) {
  require_regular_file(path);
  GzipStream stream(path);
  return read_header(stream, path).dims;
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
