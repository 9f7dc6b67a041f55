// Atomic writes via temp file + fsync + rename(2), stale temporaries of killed writers removed, up-front
// writability checks, and whole-file reads with clear errors.
#include "ipj/core/atomic_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ipj/core/error.hpp"

namespace ipj {
namespace {

namespace fs = std::filesystem;

constexpr const char* kTemporaryInfix = ".tmp.";

std::string temporary_path_for(const std::string& path) {
  return path + kTemporaryInfix + std::to_string(::getpid());
}

fs::path folder_of(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

bool process_is_alive(pid_t pid) {
  return ::kill(pid, 0) == 0 || errno == EPERM;  // EPERM: alive, owned by another user
}

// Removes "<name>.tmp.<PID>" files next to `path` whose writer process no longer exists (killed with -9
// between creating and renaming them). Best effort: a file that cannot be removed stays.
void remove_stale_temporaries(const std::string& path) {
  const std::string prefix = fs::path(path).filename().string() + kTemporaryInfix;
  std::error_code error;
  for (fs::directory_iterator entry(folder_of(path), error), end; !error && entry != end;
       entry.increment(error)) {
    const std::string name = entry->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto pid = static_cast<pid_t>(std::stol(digits));
    if (pid == ::getpid() || process_is_alive(pid)) continue;
    std::error_code ignored;
    fs::remove(entry->path(), ignored);
  }
}

// Creates and removes a file in `folder`: the only sure test that files can be written there.
void probe_folder(const fs::path& folder, const std::string& flag, const std::string& path) {
  const fs::path probe = folder / (".ipj-write-check." + std::to_string(::getpid()));
  const int descriptor = ::open(probe.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0600);
  if (descriptor < 0)
    fail(ErrorCategory::io, flag + " '" + path + "' is not writable (" + std::strerror(errno) + " in '" +
                                folder.string() + "'); choose a folder you can write to");
  ::close(descriptor);
  ::unlink(probe.c_str());
}

void create_folder_for(const fs::path& folder, const std::string& flag, const std::string& path) {
  std::error_code error;
  fs::create_directories(folder, error);
  if (error)
    fail(ErrorCategory::io, flag + " '" + path + "': cannot create folder '" + folder.string() +
                                "': " + error.message() + "; choose a folder you can write to");
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
  remove_stale_temporaries(path);
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

namespace {
void write_contents(const std::string& temporary, const std::string& contents) {
  std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
  if (!out) fail(ErrorCategory::io, "cannot open '" + temporary + "' for writing: " + std::strerror(errno));
  out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
  out.flush();
  if (!out) fail(ErrorCategory::io, "cannot write '" + temporary + "' (disk full?)");
}
}  // namespace

void write_file_atomically(const std::string& path, const std::string& contents) {
  replace_file_atomically(path, [&](const std::string& temporary) { write_contents(temporary, contents); });
}

void write_through_memory(const std::string& temporary, const std::string& path,
                          const std::function<void(std::ostream&)>& serialize) {
  std::ostringstream buffer(std::ios::binary);
  serialize(buffer);
  try {
    write_contents(temporary, buffer.str());
  } catch (const Error&) {
    fail(ErrorCategory::io, "cannot write '" + path + "': no space left for its " +
                                std::to_string(buffer.tellp()) + " bytes in '" +
                                std::filesystem::path(temporary).parent_path().string() +
                                "' (or the disk refused them); free space or choose another folder");
  }
}

void require_writable_folder(const std::string& path, const std::string& flag) {
  if (path.empty()) return;
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (fs::exists(status) && !fs::is_directory(status))
    fail(ErrorCategory::usage, flag + " '" + path + "' is a file; give a folder");
  create_folder_for(path, flag, path);
  probe_folder(path, flag, path);
}

void require_writable_file(const std::string& path, const std::string& flag) {
  if (path.empty()) return;
  std::error_code error;
  const fs::file_status status = fs::symlink_status(path, error);
  if (error && error != std::errc::no_such_file_or_directory)
    fail(ErrorCategory::io, flag + " '" + path + "': " + error.message());
  if (fs::is_directory(status))
    fail(ErrorCategory::usage, flag + " '" + path + "' is a folder; give a file name");
  if (fs::is_symlink(status)) {
    const fs::file_status target = fs::status(path, error);  // a loop fails here
    if (error && error != std::errc::no_such_file_or_directory)
      fail(ErrorCategory::io, flag + " '" + path + "': " + error.message() + "; give a plain file name");
    if (fs::is_directory(target))
      fail(ErrorCategory::usage, flag + " '" + path + "' is a folder; give a file name");
  }
  create_folder_for(folder_of(path), flag, path);
  probe_folder(folder_of(path), flag, path);
}

void require_regular_file(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0)
    fail(ErrorCategory::io, "cannot read '" + path + "': " + std::strerror(errno));
  if (S_ISREG(info.st_mode)) return;
  const char* kind = S_ISDIR(info.st_mode)    ? "a folder"
                     : S_ISCHR(info.st_mode)  ? "a character device"
                     : S_ISBLK(info.st_mode)  ? "a block device"
                     : S_ISFIFO(info.st_mode) ? "a FIFO (named pipe)"
                     : S_ISSOCK(info.st_mode) ? "a socket"
                                              : "not a regular file";
  fail(ErrorCategory::invalid_input, "'" + path + "' is " + kind +
                                         " (or a symbolic link to one), not a regular file: ipj reads only "
                                         "regular files there; put a real file at that path");
}

std::string read_file(const std::string& path, std::uint64_t max_bytes) {
  require_regular_file(path);
  // O_NONBLOCK: should the path have been swapped for a FIFO since the check, open() does not wait for it.
  const int descriptor = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (descriptor < 0) fail(ErrorCategory::io, "cannot read '" + path + "': " + std::strerror(errno));
  struct Closer {
    int descriptor;
    ~Closer() { ::close(descriptor); }
  } closer{descriptor};
  struct stat info {};
  if (::fstat(descriptor, &info) != 0)
    fail(ErrorCategory::io, "cannot read '" + path + "': " + std::strerror(errno));
  if (!S_ISREG(info.st_mode)) require_regular_file(path);  // replaced since the check: fails naming it
  auto too_large = [&](std::uint64_t bytes) {
    fail(ErrorCategory::invalid_input,
         "'" + path + "' is " + std::to_string(bytes) + " bytes, more than the " + std::to_string(max_bytes) +
             " bytes ipj reads from such a file; check that it is the right file");
  };
  if (static_cast<std::uint64_t>(info.st_size) > max_bytes)
    too_large(static_cast<std::uint64_t>(info.st_size));
  std::string contents(static_cast<std::size_t>(info.st_size), '\0');
  std::size_t done = 0;
  for (;;) {
    if (done == contents.size()) {  // at the size fstat gave: the file may have grown since
      if (contents.size() >= max_bytes + 1) too_large(contents.size());
      contents.resize(std::min<std::uint64_t>(max_bytes + 1, contents.size() + (std::size_t{1} << 16)));
    }
    const ssize_t got = ::read(descriptor, contents.data() + done, contents.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail(ErrorCategory::io, "cannot read '" + path + "': " + std::strerror(errno));
    if (got == 0) break;
    done += static_cast<std::size_t>(got);
  }
  if (done > max_bytes) too_large(done);
  contents.resize(done);
  return contents;
}

}  // namespace ipj
