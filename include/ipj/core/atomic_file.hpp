// Atomic file writes: write to a temporary file "<target>.tmp.<PID>" in the same folder, fsync, then rename
// over the target. A crash leaves either the old file or the new one, never a torn one; temporaries left by a
// killed writer are removed by the next write to the same target (when no process with that PID exists on
// this machine: a folder shared between machines may hold another host's live temporary). POSIX only.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <ostream>
#include <string>

namespace ipj {

// Writes `contents` to `path` atomically. Creates missing parent folders. Throws ipj::Error(io).
void write_file_atomically(const std::string& path, const std::string& contents);

// Calls `writer` with a path to a temporary file next to `path`; when it returns, fsyncs and renames it
// to `path`. For writers that insist on opening the file themselves (e.g. torch::save). The temporary
// file is removed if `writer` throws; stale temporaries of `path` whose process is gone are removed first.
void replace_file_atomically(const std::string& path, const std::function<void(const std::string&)>& writer);

// Inside replace_file_atomically's writer: writes to `temporary` what `serialize` writes to a stream, through
// memory. LibTorch's zip writer throws from its destructor when the disk fills, which ends the process and
// leaves the temporary behind; a memory stream cannot fail, and the bytes then go to disk with each write
// checked (ipj::Error io naming `path`).
void write_through_memory(const std::string& temporary, const std::string& path,
                          const std::function<void(std::ostream&)>& serialize);

// Checks before any work that an output can be written: creates the folder (or the file's parent folder) and
// a probe file in it. `flag` names the option in messages (e.g. "--out"). Throws ipj::Error(io) naming the
// flag and path when it cannot (permissions, a symbolic-link loop, a read-only file system), Error(usage)
// for a file where a folder is wanted or the other way round. Empty paths are accepted (nothing to write).
void require_writable_folder(const std::string& path, const std::string& flag);
void require_writable_file(const std::string& path, const std::string& flag);

// Largest file read_file reads unless told otherwise (a data file: a CIFAR batch, an image, a results file).
inline constexpr std::uint64_t kMaxReadFileBytes = std::uint64_t{1} << 30;

// Throws ipj::Error(invalid_input) naming `path` unless it is (or links to) a regular file: a device such as
// /dev/zero, a FIFO, a socket or a folder would be read without end, block, or mean nothing. Error(io) when
// it does not exist or cannot be inspected.
void require_regular_file(const std::string& path);

// Reads a whole regular file of at most `max_bytes`, checked before reading (and again while reading, for a
// file that grows): Error(invalid_input) naming the path, the size and the limit when it is larger, or when
// it is not a regular file (require_regular_file; a FIFO is never opened for reading, so it cannot block);
// Error(io) naming the path when it cannot be read.
std::string read_file(const std::string& path, std::uint64_t max_bytes = kMaxReadFileBytes);

}  // namespace ipj
