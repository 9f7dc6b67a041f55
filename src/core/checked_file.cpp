// xxHash64 checksums in zip comments (LibTorch archives) and in a last "checksum" key (JSON results files).
// Zip layout used: the End Of Central Directory record (22 bytes, "PK\5\6", comment length in its last 2
// bytes) ends every archive LibTorch writes; sealing sets the comment length to 26 and appends the comment.
#include "ipj/core/checked_file.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <vector>

#include "ipj/core/error.hpp"

namespace ipj {
namespace {

constexpr std::string_view kZipEndSignature{"PK\x05\x06", 4};
constexpr std::size_t kZipEndBytes = 22;
constexpr std::string_view kZipCommentPrefix = "ipj-xxh64:";
constexpr std::size_t kDigits = 16;
constexpr std::size_t kZipCommentBytes = 26;  // prefix + digits
constexpr std::string_view kJsonChecksumKey = "\"checksum\": \"xxh64:";
constexpr std::string_view kZeroDigits = "0000000000000000";

std::string hex_of(XXH64_hash_t hash) {
  char text[kDigits + 1];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

bool is_hex_digits(std::string_view text) {
  if (text.size() != kDigits) return false;
  for (const char digit : text)
    if (!((digit >= '0' && digit <= '9') || (digit >= 'a' && digit <= 'f'))) return false;
  return true;
}

// A file descriptor closed on scope exit; throws Error(io) naming the file when it cannot be opened.
class OpenFile {
 public:
  OpenFile(const std::string& path, int flags) : path_(path), descriptor_(::open(path.c_str(), flags)) {
    if (descriptor_ < 0) fail(ErrorCategory::io, "cannot open '" + path + "': " + std::strerror(errno));
  }
  ~OpenFile() { ::close(descriptor_); }
  OpenFile(const OpenFile&) = delete;
  OpenFile& operator=(const OpenFile&) = delete;

  std::uint64_t size() const {
    const off_t end = ::lseek(descriptor_, 0, SEEK_END);
    if (end < 0) fail(ErrorCategory::io, "cannot read '" + path_ + "': " + std::strerror(errno));
    return static_cast<std::uint64_t>(end);
  }
  std::string read_at(std::uint64_t offset, std::size_t count) const {
    std::string bytes(count, '\0');
    std::size_t done = 0;
    while (done < count) {
      const ssize_t got =
          ::pread(descriptor_, bytes.data() + done, count - done, static_cast<off_t>(offset + done));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) fail(ErrorCategory::io, "cannot read '" + path_ + "': " + std::strerror(errno));
      done += static_cast<std::size_t>(got);
    }
    return bytes;
  }
  void write_at(std::uint64_t offset, std::string_view bytes) const {
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t put =
          ::pwrite(descriptor_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
      if (put < 0 && errno == EINTR) continue;
      if (put <= 0) fail(ErrorCategory::io, "cannot write '" + path_ + "': " + std::strerror(errno));
      done += static_cast<std::size_t>(put);
    }
  }
  // Feeds bytes [0, count) of the file into `state`, 1 MiB at a time.
  void hash_prefix(XXH64_state_t* state, std::uint64_t count) const {
    constexpr std::size_t kChunk = std::size_t{1} << 20;
    for (std::uint64_t offset = 0; offset < count; offset += kChunk) {
      const std::string chunk =
          read_at(offset, static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, count - offset)));
      XXH64_update(state, chunk.data(), chunk.size());
    }
  }

 private:
  std::string path_;
  int descriptor_;
};

using HashState = std::unique_ptr<XXH64_state_t, decltype(&XXH64_freeState)>;

HashState new_hash_state() {
  HashState state(XXH64_createState(), &XXH64_freeState);
  if (!state) throw std::bad_alloc();
  XXH64_reset(state.get(), 0);
  return state;
}

[[noreturn]] void fail_damaged(const std::string& path, const std::string& detail) {
  fail(ErrorCategory::invalid_input, "'" + path + "' is damaged: " + detail +
                                         "; restore it from a backup or create it again (ipj refuses damaged "
                                         "files rather than loading wrong weights or numbers)");
}

}  // namespace

std::string xxh64_hex(std::string_view bytes) {
  return hex_of(XXH64(bytes.data(), bytes.size(), 0));
}

void seal_zip_archive(const std::string& path) {
  const OpenFile file(path, O_RDWR);
  const std::uint64_t size = file.size();
  if (size < kZipEndBytes) fail(ErrorCategory::io, "cannot seal '" + path + "': not a zip archive");
  const std::string end = file.read_at(size - kZipEndBytes, kZipEndBytes);
  if (end.compare(0, 4, kZipEndSignature) != 0 || end[20] != 0 || end[21] != 0)
    fail(ErrorCategory::io, "cannot seal '" + path + "': not a zip archive without a comment");
  const std::string comment_length{static_cast<char>(kZipCommentBytes), '\0'};  // little-endian u16
  HashState state = new_hash_state();
  file.hash_prefix(state.get(), size - 2);
  XXH64_update(state.get(), comment_length.data(), comment_length.size());
  XXH64_update(state.get(), kZipCommentPrefix.data(), kZipCommentPrefix.size());
  const std::string comment = std::string(kZipCommentPrefix) + hex_of(XXH64_digest(state.get()));
  file.write_at(size - 2, comment_length + comment);
}

ChecksumStatus verify_zip_archive(const std::string& path) {
  const OpenFile file(path, O_RDONLY);
  const std::uint64_t size = file.size();
  const std::size_t sealed_tail = kZipEndBytes + kZipCommentBytes;
  const std::string tail = file.read_at(size - std::min<std::uint64_t>(size, sealed_tail),
                                        static_cast<std::size_t>(std::min<std::uint64_t>(size, sealed_tail)));
  // Sealed when either half of the trailer is in place, so that one damaged byte cannot make a sealed file
  // look unsealed.
  const bool end_record_in_place = tail.size() == sealed_tail && tail.compare(0, 4, kZipEndSignature) == 0;
  const bool prefix_in_place =
      tail.size() >= kZipCommentBytes &&
      tail.compare(tail.size() - kZipCommentBytes, kZipCommentPrefix.size(), kZipCommentPrefix) == 0;
  if (!end_record_in_place && !prefix_in_place) return ChecksumStatus::absent;
  if (!end_record_in_place || !prefix_in_place || static_cast<unsigned char>(tail[20]) != kZipCommentBytes ||
      tail[21] != 0)
    fail_damaged(path, "the end of the archive (zip directory end and ipj checksum) is broken");
  const std::string stored = tail.substr(tail.size() - kDigits);
  if (!is_hex_digits(stored)) fail_damaged(path, "its ipj checksum '" + stored + "' is not 16 hex digits");
  HashState state = new_hash_state();
  file.hash_prefix(state.get(), size - kDigits);
  const std::string computed = hex_of(XXH64_digest(state.get()));
  if (computed != stored)
    fail_damaged(path, "xxh64 checksum mismatch (stored " + stored + ", contents hash to " + computed + ")");
  return ChecksumStatus::verified;
}

void require_checksum_for_format(const std::string& path, const std::string& what, ChecksumStatus status,
                                 std::int64_t format) {
  if (status == ChecksumStatus::verified) return;
  if (format >= kFirstSealedArchiveFormat)
    fail_damaged(path,
                 "it is an ipj " + what + " of format " + std::to_string(format) +
                     ", which ipj always writes with a checksum (the zip comment ipj-xxh64:...), but it has "
                     "none: the checksum was stripped or lost");
  static std::mutex mutex;
  static std::set<std::string> warned;
  const std::lock_guard<std::mutex> lock(mutex);
  if (warned.insert(path).second)
    spdlog::warn(
        "'{}' is an ipj {} without a checksum (written before checksums were added): it cannot be "
        "checked for damage; write it again with this ipj to add one",
        path, what);
}

void rethrow_as_load_error(const std::string& path, const std::string& what) {
  try {
    throw;
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    fail(ErrorCategory::invalid_input, "'" + path + "' is not a loadable " + what +
                                           ": it declares more memory than this machine can give (damaged?)");
  } catch (const std::exception& error) {
    const std::string message = error.what();  // LibTorch appends a multi-line backtrace: keep the first line
    fail(ErrorCategory::invalid_input,
         "'" + path + "' is not a loadable " + what + ": " + message.substr(0, message.find('\n')));
  } catch (...) {
    fail(ErrorCategory::invalid_input, "'" + path + "' is not a loadable " + what);
  }
}

void load_file_checked(const std::string& path, const std::string& what, const std::function<void()>& load) {
  try {
    load();
  } catch (...) {
    rethrow_as_load_error(path, what);
  }
}

std::string seal_json_text(const Json& value) {
  if (!value.is_object()) return value.dump(2) + "\n";
  Json sealed = value;
  sealed.erase("checksum");
  sealed["checksum"] = "xxh64:" + std::string(kZeroDigits);
  std::string text = sealed.dump(2) + "\n";
  const std::size_t digits = text.rfind(kJsonChecksumKey) + kJsonChecksumKey.size();
  text.replace(digits, kDigits, xxh64_hex(text));
  return text;
}

ChecksumStatus verify_json_text(const std::string& path, const std::string& text, Json& value) {
  // Sealed when the key parses or either half of the last line is in place near the end, so that one damaged
  // byte (in the key's name, say) cannot make a sealed file look unsealed.
  const std::string_view end =
      std::string_view(text).substr(text.size() - std::min<std::size_t>(text.size(), 80));
  const bool key_parsed = value.is_object() && value.contains("checksum");
  if (!key_parsed && end.find("xxh64:") == std::string_view::npos &&
      end.find("\"checksum\"") == std::string_view::npos)
    return ChecksumStatus::absent;
  constexpr std::string_view kClosing = "\"\n}\n";  // after the digits: end of the string and of the object
  const std::size_t line_bytes = kJsonChecksumKey.size() + kDigits + kClosing.size();
  if (text.size() < line_bytes ||
      text.compare(text.size() - kClosing.size(), kClosing.size(), kClosing) != 0 ||
      text.compare(text.size() - line_bytes, kJsonChecksumKey.size(), kJsonChecksumKey) != 0)
    fail_damaged(path,
                 "its \"checksum\" is not where ipj writes it (a damaged file, or one reformatted or "
                 "edited: remove the \"checksum\" key to accept an edited file)");
  const std::size_t digits = text.size() - kClosing.size() - kDigits;
  const std::string stored = text.substr(digits, kDigits);
  if (!key_parsed || !value["checksum"].is_string() ||
      value["checksum"].get<std::string>() != "xxh64:" + stored || !is_hex_digits(stored))
    fail_damaged(path, "its \"checksum\" value is broken");
  std::string zeroed = text;
  zeroed.replace(digits, kDigits, kZeroDigits);
  const std::string computed = xxh64_hex(zeroed);
  if (computed != stored)
    fail_damaged(path, "xxh64 checksum mismatch (stored " + stored + ", contents hash to " + computed +
                           "; an edited file: remove the \"checksum\" key to accept it)");
  value.erase("checksum");
  return ChecksumStatus::verified;
}

}  // namespace ipj
