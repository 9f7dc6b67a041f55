// A cache of test inputs that are slow to make (models written by python3-torch, trained checkpoints), shared
// by the test processes of one build: CTest runs every test in its own process, so a per-process static would
// remake them for each test. Limits: keyed by what the caller names (commands, file contents, the test
// executable); entries are never evicted (they live in the build folder, `rm -rf build/test-cache` clears
// them).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "support/test_support.hpp"

namespace ipj::testing {

// The folder of a cache entry made once per `key`: `make(folder)` fills a fresh folder and returns whether it
// succeeded; a complete entry is published by an atomic rename, so concurrent tests never see half an entry
// (two may both make it; one wins). The cache is $IPJ_TEST_CACHE (CTest sets build/test-cache); without it,
// one folder per key in this process. Returns "" when `make` failed (nothing is kept).
std::string cached_folder(const std::string& key, const std::function<bool(const std::string&)>& make);

// Copies every file and folder of `from` (but the cache's own marker files) into `to`, created if missing.
void copy_folder_contents(const std::string& from, const std::string& to);

// Runs `command_prefix DIR command_suffix` (a maker that writes files into DIR) through the cache: made once
// per prefix, suffix and the contents of `key_files`, then copied into `directory`. stdout/stderr of the
// making run are kept with the entry and returned.
ProcessResult run_cached_maker(const std::string& command_prefix, const std::string& directory,
                               const std::string& command_suffix, const std::vector<std::string>& key_files);

// Modification time and size of the running test executable: a key part for entries made by ipj's own code
// (they are remade after a rebuild).
std::string this_executable_signature();

}  // namespace ipj::testing
