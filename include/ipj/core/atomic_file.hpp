// Atomic file writes: write to a temporary file "<target>.tmp.<PID>" in the same folder, fsync, then rename
// over the target. A crash leaves either the old file or the new one, never a torn one; temporaries left by a
// killed writer are removed by the next write to the same target (when no process with that PID exists on
// this machine: a folder shared between machines may hold another host's live temporary). POSIX only.
#pragma once

#include <functional>
#include <ostream>
#include <string>

namespace ipj {

// Writes `contents` to `path` atomically. Creates missing parent folders. Throws ipj::Error(io).
void write_file_atomically(const std::string& path, const std::string& contents);

// Calls `writer` with a path to a temporary file next to `path`; when it returns, fsyncs and renames it
// to `path`. For writers that insist on opening the file themselves (e.g. torch::save). The temporary
// file is removed if `writer` throws; stale temporaries of `path` whose process is gone are removed first.
void replace_file_atomically(const std::string& path, const std::function<void(const std::string&)>& writer);

// Checks before any work that an output can be written: creates the folder (or the file's parent folder) and
// a probe file in it. `flag` names the option in messages (e.g. "--out"). Throws ipj::Error(io) naming the
// flag and path when it cannot (permissions, a symbolic-link loop, a read-only file system), Error(usage)
// for a file where a folder is wanted or the other way round. Empty paths are accepted (nothing to write).
void require_writable_folder(const std::string& path, const std::string& flag);
void require_writable_file(const std::string& path, const std::string& flag);

// Reads a whole file; throws ipj::Error(io) naming the path if it cannot.
std::string read_file(const std::string& path);

}  // namespace ipj
