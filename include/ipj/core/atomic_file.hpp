// Atomic file writes: write to a temporary file in the same folder, fsync, then rename over the target.
// A crash leaves either the old file or the new one, never a torn one. POSIX only.
#pragma once

#include <functional>
#include <ostream>
#include <string>

namespace ipj {

// Writes `contents` to `path` atomically. Creates missing parent folders. Throws ipj::Error(io).
void write_file_atomically(const std::string& path, const std::string& contents);

// Calls `writer` with a path to a temporary file next to `path`; when it returns, fsyncs and renames it
// to `path`. For writers that insist on opening the file themselves (e.g. torch::save). The temporary
// file is removed if `writer` throws.
void replace_file_atomically(const std::string& path, const std::function<void(const std::string&)>& writer);

// Reads a whole file; throws ipj::Error(io) naming the path if it cannot.
std::string read_file(const std::string& path);

}  // namespace ipj
