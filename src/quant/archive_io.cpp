// Atomic, sealed writes of the quant module's model archives.
#include "archive_io.hpp"

#include "ipj/core/atomic_file.hpp"
#include "ipj/core/checked_file.hpp"
#include "ipj/core/error.hpp"

namespace ipj::quant {

void save_sealed_archive(torch::serialize::OutputArchive& archive, const std::string& path) {
  replace_file_atomically(path, [&](const std::string& temporary) {
    try {
      write_through_memory(temporary, path, [&](std::ostream& out) { archive.save_to(out); });
    } catch (const c10::Error& error) {
      fail(ErrorCategory::io, "cannot write '" + path + "': " + error.what_without_backtrace());
    }
    seal_zip_archive(temporary);
  });
}

OpenedArchive open_ipj_archive(const std::string& path, const std::string& marker, std::int64_t version,
                               const std::string& what) {
  const ChecksumStatus checksum = verify_zip_archive(path);
  OpenedArchive opened;
  try {
    opened.archive.load_from(path);
  } catch (const c10::Error& error) {
    fail(ErrorCategory::invalid_input,
         "'" + path + "' is not a readable ipj " + what + ": " + error.what_without_backtrace());
  }
  c10::IValue format, meta_value;
  if (!opened.archive.try_read(marker, format) || !format.isInt())
    fail(ErrorCategory::invalid_input, "'" + path + "' is not an ipj " + what + " (no " + marker + ")");
  if (format.toInt() < 1 || format.toInt() > version)
    fail(ErrorCategory::invalid_input, "'" + path + "' has " + what + " format " +
                                           std::to_string(format.toInt()) + ", this ipj reads formats 1 to " +
                                           std::to_string(version));
  require_checksum_for_format(path, what, checksum, format.toInt());
  try {
    opened.archive.read("meta_json", meta_value);
    opened.meta = parse_json_text(meta_value.toStringRef(), "'" + path + "' meta_json");
  } catch (const Json::exception& error) {
    fail(ErrorCategory::invalid_input, "'" + path + "': damaged " + what + " metadata: " + error.what());
  } catch (const c10::Error& error) {
    fail(ErrorCategory::invalid_input,
         "'" + path + "': damaged " + what + " (no readable meta_json): " + error.what_without_backtrace());
  }
  return opened;
}

}  // namespace ipj::quant
