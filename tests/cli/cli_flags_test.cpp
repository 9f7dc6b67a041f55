// Every numeric flag of every command, read from `ipj CMD --help` (so new flags are covered), fed values a
// user types by mistake (-1, 0, 1e20, nan, abc; one per flag in turn, all with IPJ_FLAG_SCAN_FULL=1) through
// the real binary: never an internal error (exit 70) or a signal; out-of-range values and non-numbers exit 2
// naming the flag and its range. Each command gets
// arguments that make an otherwise valid run stop at once (a missing model, an --out below a plain file).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <future>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "ipj/core/atomic_file.hpp"
#include "support/test_support.hpp"

namespace ipj {
namespace {

struct FlagInfo {
  std::string name;
  std::string type;  // INT, UINT, FLOAT, NUMBER, TEXT, ... with ":<validator>" when the flag has a check
};

// Value-taking options of `ipj COMMAND --help`: "  --epochs INT:[1, 1000000] [1]  Training epochs".
std::vector<FlagInfo> command_flags(const std::string& command) {
  const auto help = testing::run_process(testing::ipj_binary() + " " + command + " --help");
  EXPECT_EQ(help.exit_code, 0) << command << ": " << help.err;
  std::vector<FlagInfo> flags;
  const std::regex option(R"(^\s+(?:-\w,)?(--[a-z0-9-]+)\s+([A-Z]+(?::\S+(?: \S+\])?)?))");
  std::istringstream lines(help.out);
  std::string line;
  while (std::getline(lines, line)) {
    std::smatch match;
    if (std::regex_search(line, match, option)) flags.push_back({match[1], match[2]});
  }
  return flags;
}

bool is_typed_number(const std::string& type) {
  for (const char* kind : {"INT", "UINT", "FLOAT", "NUMBER"})
    if (type.rfind(kind, 0) == 0) return true;
  return false;
}

// TEXT flags that hold numbers (lists, shapes): checked for "never 70", their messages are the commands'.
const std::set<std::string>& numeric_text_flags() {
  static const std::set<std::string> names{
      "--batch", "--concurrency", "--resize", "--mean", "--std", "--input-shape", "--teacher-input-shape"};
  return names;
}

struct FlagRun {
  std::string command, flag, value;
  bool typed = false;  // a typed numeric flag: its bad values must be usage errors naming it
  testing::ProcessResult result;
};

}  // namespace

TEST(CliFlags, EveryNumericFlagIsRangeCheckedAndNeverAnInternalError) {
  testing::TempDir dir;
  write_file_atomically(dir.file("file"), "a plain file: nothing can be created below it\n");
  const std::string below = dir.file("file") + "/";
  // Arguments with which a run whose flags are all valid stops at once, before any real work.
  const std::map<std::string, std::string> fail_fast{
      {"train", "--data " + below + "data --out " + below + "out --no-energy"},
      {"compare", "--data " + below + "data --out " + below + "out"},
      {"tune", "--data " + below + "data --out " + below + "out"},
      {"distill", "--teacher " + below + "t.pt --data " + below + "data --out " + below + "out"},
      {"quantize", "--model " + below + "m.pt --out " + below + "q.pt"},
      {"prune", "--model " + below + "m.pt --out " + below + "p.pt"},
      {"export", "--model " + below + "m.pt --out " + below + "e.onnx"},
      {"bench", "--model " + below + "m.pt --no-energy"},
      {"serve", "--model-repo " + below + "repo --host 127.0.0.1 --port 0 --no-energy"},
      {"load", "--url ftp://nowhere --model m"},
      {"measure", "-- " + below + "command"},
      {"launch", "-- " + below + "command"},
      {"models", "--input 0x0x0"}};
  std::vector<FlagRun> runs;
  int typed_flags = 0;
  std::size_t turn = 0;
  std::set<std::string> seen;
  const char* full = std::getenv("IPJ_FLAG_SCAN_FULL");
  const bool full_scan = full != nullptr && std::string(full) == "1";
  for (const auto& [command, arguments] : fail_fast) {
    const std::vector<FlagInfo> flags = command_flags(command);
    EXPECT_FALSE(flags.empty()) << command;
    for (const FlagInfo& flag : flags) {
      const bool typed = is_typed_number(flag.type);
      if (!typed && numeric_text_flags().count(flag.name) == 0) continue;
      // A flag shared by several commands with the same check (--limit, --threads, the data flags) is run
      // once by default; IPJ_FLAG_SCAN_FULL=1 runs it on every command.
      if (!full_scan && !seen.insert(flag.name + " " + flag.type).second) {
        typed_flags += typed ? 1 : 0;
        continue;
      }
      // A typed numeric flag without a validator would take -1 or 1e30 as CLI11 converts them.
      if (typed) {
        ++typed_flags;
        EXPECT_NE(flag.type.find(':'), std::string::npos)
            << "ipj " << command << " " << flag.name << " (" << flag.type << ") has no range check";
      }
      // Each ipj process costs ~0.7 s of LibTorch start-up: by default every flag gets one of the five
      // values in turn (each value reaches ~1/5 of the flags); IPJ_FLAG_SCAN_FULL=1 feeds all five to every
      // flag of every command (~650 runs).
      const std::vector<std::string> values{"-1", "0", "99999999999999999999", "nan", "abc"};
      for (std::size_t pick = 0; pick < values.size(); ++pick) {
        if (!full_scan && pick != turn % values.size()) continue;
        // The flag goes first (`measure` and `launch` take the command after "--"), without its fail-fast
        // value (serve's --port 0).
        std::string rest = arguments;
        const std::size_t given = rest.find(flag.name + " ");
        if (given != std::string::npos)
          rest.erase(given, rest.find(' ', given + flag.name.size() + 1) - given);
        runs.push_back(
            {testing::ipj_binary() + " " + command + " " + flag.name + " " + values[pick] + " " + rest,
             flag.name,
             values[pick],
             typed,
             {}});
      }
      ++turn;
    }
  }
  EXPECT_GT(typed_flags, 90);  // the help parse found the flags (about 100 today)
  // Four processes at a time: most stop while parsing flags.
  std::vector<std::future<void>> workers;
  std::atomic<std::size_t> next{0};
  for (int worker = 0; worker < 4; ++worker)
    workers.push_back(std::async(std::launch::async, [&] {
      for (std::size_t index = next++; index < runs.size(); index = next++)
        runs[index].result = testing::run_process(runs[index].command);
    }));
  for (auto& worker : workers)
    worker.get();
  for (const FlagRun& run : runs) {
    const auto& result = run.result;
    EXPECT_TRUE(result.exit_code >= 0 && result.exit_code < 128 && result.exit_code != 70)
        << run.command << "\nexit " << result.exit_code << "\n"
        << result.err;
    if (!run.typed || std::string(run.value) == "0") continue;
    EXPECT_EQ(result.exit_code, 2) << run.command << "\n" << result.err;
    EXPECT_NE(result.err.find(run.flag), std::string::npos) << run.command << "\n" << result.err;
    EXPECT_TRUE(result.err.find(" in [") != std::string::npos ||
                result.err.find(" in (") != std::string::npos || result.err.find('{') != std::string::npos)
        << run.command << ": the message should give the allowed range\n"
        << result.err;
  }
}

// The issue's two examples: a wrapped seed and CLI11's "At Most 1 required but received 2".
TEST(CliFlags, NegativeSeedAndLimitNameTheFlagAndRange) {
  testing::TempDir dir;
  const auto seed = testing::run_process(testing::ipj_binary() + " train --seed -1 --no-save --data " +
                                         dir.file("missing"));
  testing::expect_cli_failure(
      seed, 2, "--seed: '-1' is out of range: give a whole number in [0, 18446744073709551615]");
  const auto limit = testing::run_process(testing::ipj_binary() + " train --limit -1 --no-save --data " +
                                          dir.file("missing"));
  testing::expect_cli_failure(limit, 2, "--limit: '-1' is out of range: give a whole number in [0, ");
  const auto batch =
      testing::run_process(testing::ipj_binary() + " bench --model " + dir.file("m.pt") + " --batch 4,-1");
  testing::expect_cli_failure(batch, 2, "--batch 4,-1: '-1' is out of range");
}

}  // namespace ipj
