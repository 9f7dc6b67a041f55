// DIR/trials.jsonl: one JSON object per finished trial (and per held-out run), appended as each ends. Each
// line goes out in one write(2) followed by fsync, so a crash or kill -9 can at worst leave a torn last
// line; reading detects it (no newline at the end, or not JSON) and drops it, so that --resume continues.
#pragma once

#include <string>
#include <vector>

#include "ipj/core/json_io.hpp"

namespace ipj::tune {

struct TrialLogContents {
  std::vector<Json> records;  // complete lines, in order
  bool torn_tail = false;     // the last line was incomplete and was dropped
  std::string torn_text;      // what it held (for the warning)
};

// Reads `path` (a missing file reads as empty). A torn last line is reported, not thrown; a corrupt line
// before the last (which an append-only writer cannot produce) throws ipj::Error(invalid_input) naming it.
TrialLogContents read_trial_log(const std::string& path);

// Rewrites `path` atomically with `records` only (drops a torn tail before appending after it).
void rewrite_trial_log(const std::string& path, const std::vector<Json>& records);

// Appends `record` as one line (single write + fsync). Throws ipj::Error(io) naming the file.
void append_trial_record(const std::string& path, const Json& record);

}  // namespace ipj::tune
