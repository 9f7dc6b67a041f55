// Atomic, sealed writes of the quant module's model archives.
#include "archive_io.hpp"

#include "ipj/core/atomic_file.hpp"
#include "ipj/core/checked_file.hpp"
#include "ipj/core/error.hpp"

namespace ipj::quant {

void save_sealed_archive(torch::serialize::OutputArchive& archive, const std::string& path) {
  replace_file_atomically(path, [&](const std::string& temporary) {
    try {
      archive.save_to(temporary);
    } catch (const c10::Error& error) {
      fail(ErrorCategory::io, "cannot write '" + path + "': " + error.what_without_backtrace());
    }
    seal_zip_archive(temporary);
  });
}

}  // namespace ipj::quant
