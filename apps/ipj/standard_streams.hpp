// The process's standard descriptors as ipj's main() finds and leaves them: closed ones are filled with
// /dev/null (stdout: /dev/full) at start (else the next pipe or socket takes their number and a log line
// lands in it), and a write to stdout that failed (a full disk, /dev/full) turns a successful run into an I/O
// error at the end.
#pragma once

#include <optional>
#include <string>

namespace ipj::cli {

// Opens /dev/null on each of descriptors 0 and 2 that is closed, /dev/full on a closed 1 (output to a closed
// stdout is an error, as in coreutils, not silently dropped). Call first in main().
void fill_closed_standard_descriptors();

// Flushes stdout (C++ and C streams); the reason when anything written to it was lost, else nullopt.
std::optional<std::string> standard_output_failure();

}  // namespace ipj::cli
