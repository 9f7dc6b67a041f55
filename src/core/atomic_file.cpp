// Atomic writes via temp file + fsync + rename(2), and whole-file reads with clear errors.
#include "ipj/core/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ipj/core/error.hpp"

namespace ipj {
namespace {

std::string temporary_path_for(const std::string& path) {
  return path + ".tmp." + std::to_string(::getpid());
}

void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void ensure_parent_exists(const std::string& path) {
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (parent.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(parent, ec);
  if (ec) fail(ErrorCategory::io, "cannot create folder '" + parent.string() + "': " + ec.message());
}

}  // namespace

void replace_file_atomically(const std::string& path, const std::function<void(const std::string&)>& writer) {
  ensure_parent_exists(path);
  const std::string temporary = temporary_path_for(path);
  try {
    writer(temporary);
  } catch (...) {
    std::remove(temporary.c_str());
    throw;
  }
  fsync_path(temporary);
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(errno);
    std::remove(temporary.c_str());
    fail(ErrorCategory::io, "cannot write '" + path + "': rename failed: " + reason);
  }
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  fsync_path(parent.empty() ? "." : parent.string());
}

void write_file_atomically(const std::string& path, const std::string& contents) {
  replace_file_atomically(path, [&](const std::string& temporary) {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) fail(ErrorCategory::io, "cannot open '" + temporary + "' for writing: " + std::strerror(errno));
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    out.flush();
    if (!out) fail(ErrorCategory::io, "cannot write '" + temporary + "' (disk full?)");
  });
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(ErrorCategory::io, "cannot read '" + path + "': " + std::strerror(errno));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace ipj
