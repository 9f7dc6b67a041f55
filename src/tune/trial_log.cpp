// The append-only trial log: single-write appends with fsync, torn-tail detection on read.
#include "ipj/tune/trial_log.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "ipj/core/atomic_file.hpp"
#include "ipj/core/error.hpp"
#include "ipj/core/json_io.hpp"

namespace ipj::tune {

TrialLogContents read_trial_log(const std::string& path) {
  TrialLogContents contents;
  if (!std::filesystem::exists(path)) return contents;
  const std::string text = read_file(path, kJsonFileLimits.max_bytes);
  size_t begin = 0;
  int line_number = 0;
  while (begin < text.size()) {
    ++line_number;
    const size_t end = text.find('\n', begin);
    const bool complete = end != std::string::npos;
    const std::string line = text.substr(begin, complete ? end - begin : std::string::npos);
    begin = complete ? end + 1 : text.size();
    const bool last = begin >= text.size();
    Json record;
    bool parsed = false;
    try {
      check_json_depth(line, kJsonFileLimits.max_depth, "'" + path + "' line " + std::to_string(line_number));
      record = Json::parse(line);
      parsed = record.is_object();
    } catch (const nlohmann::json::parse_error&) {
    }
    if (parsed && complete) {
      contents.records.push_back(std::move(record));
      continue;
    }
    if (last) {  // a crash while appending: drop it, the trial runs again
      contents.torn_tail = true;
      contents.torn_text = line.substr(0, 80);
      break;
    }
    fail(ErrorCategory::invalid_input,
         "'" + path + "' line " + std::to_string(line_number) +
             " is not a complete JSON object, and it is not the last line (a crash can only tear the last "
             "one): the file was edited; restore it or start a new --out folder");
  }
  return contents;
}

void rewrite_trial_log(const std::string& path, const std::vector<Json>& records) {
  std::string text;
  for (const auto& record : records)
    text += record.dump() + "\n";
  write_file_atomically(path, text);
}

void append_trial_record(const std::string& path, const Json& record) {
  const std::string line = record.dump() + "\n";
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    fail(ErrorCategory::io, "cannot open '" + path + "' to append a trial: " + std::strerror(errno));
  // One write(2) per line: an append of this size is not interleaved, and a crash tears at most this line.
  const ssize_t written = ::write(fd, line.data(), line.size());
  const int write_errno = errno;
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (written != static_cast<ssize_t>(line.size()) || !synced)
    fail(ErrorCategory::io,
         "cannot append to '" + path +
             "': " + (written < 0 ? std::strerror(write_errno) : std::string("short write (disk full?)")));
}

}  // namespace ipj::tune
