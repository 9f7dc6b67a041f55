// The build-wide test input cache (see test_cache.hpp): entries under $IPJ_TEST_CACHE published by rename.
#include "support/test_cache.hpp"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace ipj::testing {
namespace {

namespace fs = std::filesystem;
constexpr const char* kCompleteMarker = ".complete";
constexpr const char* kStdoutFile = ".stdout";
constexpr const char* kStderrFile = ".stderr";

std::string read_whole_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

void write_whole_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out.flush()) throw std::runtime_error("test cache: cannot write " + path.string());
}

std::string hex_key(const std::string& key) {
  std::ostringstream out;
  out << std::hex << std::hash<std::string>{}(key) << "-" << key.size();
  return out.str();
}

}  // namespace

std::string cached_folder(const std::string& key, const std::function<bool(const std::string&)>& make) {
  static TempDir uncached;  // no $IPJ_TEST_CACHE: entries live as long as this process
  static std::atomic<int> counter{0};
  const char* root = std::getenv("IPJ_TEST_CACHE");
  const fs::path base = root != nullptr && *root != '\0' ? fs::path(root) : fs::path(uncached.path());
  fs::create_directories(base);
  const fs::path entry = base / hex_key(key);
  if (fs::exists(entry / kCompleteMarker)) return entry.string();
  const fs::path temporary =
      base / (hex_key(key) + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++));
  fs::remove_all(temporary);
  fs::create_directories(temporary);
  if (!make(temporary.string())) {
    fs::remove_all(temporary);
    return "";
  }
  write_whole_file(temporary / kCompleteMarker, key);
  std::error_code error;
  fs::rename(temporary, entry, error);  // fails when another process published first: use theirs
  if (error) fs::remove_all(temporary);
  if (!fs::exists(entry / kCompleteMarker))
    throw std::runtime_error("test cache: " + entry.string() + " is incomplete: " + error.message());
  return entry.string();
}

void copy_folder_contents(const std::string& from, const std::string& to) {
  fs::create_directories(to);
  for (const fs::directory_entry& item : fs::directory_iterator(from)) {
    const std::string name = item.path().filename().string();
    if (name == kCompleteMarker || name == kStdoutFile || name == kStderrFile) continue;
    fs::copy(item.path(), fs::path(to) / name,
             fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  }
}

ProcessResult run_cached_maker(const std::string& command_prefix, const std::string& directory,
                               const std::string& command_suffix, const std::vector<std::string>& key_files) {
  std::string key = "maker\n" + command_prefix + "\n" + command_suffix;
  for (const std::string& file : key_files)
    key += "\n" + file + "\n" + read_whole_file(file);
  ProcessResult failed;
  const std::string entry = cached_folder(key, [&](const std::string& folder) {
    const ProcessResult made = run_process(command_prefix + " " + folder + " " + command_suffix);
    write_whole_file(fs::path(folder) / kStdoutFile, made.out);
    write_whole_file(fs::path(folder) / kStderrFile, made.err);
    if (made.exit_code != 0) failed = made;
    return made.exit_code == 0;
  });
  if (entry.empty()) return failed;
  copy_folder_contents(entry, directory);
  ProcessResult result;
  result.exit_code = 0;
  result.out = read_whole_file(fs::path(entry) / kStdoutFile);
  result.err = read_whole_file(fs::path(entry) / kStderrFile);
  return result;
}

std::string this_executable_signature() {
  const fs::path self = fs::read_symlink("/proc/self/exe");
  const auto written = fs::last_write_time(self).time_since_epoch().count();
  return self.string() + ":" + std::to_string(written) + ":" + std::to_string(fs::file_size(self));
}

}  // namespace ipj::testing
