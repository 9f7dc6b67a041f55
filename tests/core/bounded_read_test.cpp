// Bounded reads of local files (issue 22): devices, FIFOs and folders refused unread, sizes checked before
// reading, JSON nesting checked before parsing, and unsealed archives accepted only in pre-checksum formats.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "ipj/core/atomic_file.hpp"
#include "ipj/core/checked_file.hpp"
#include "ipj/core/error.hpp"
#include "ipj/core/json_io.hpp"
#include "support/test_support.hpp"

namespace ipj {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

template <typename Read>
void expect_invalid_naming(const std::string& path, const std::string& fragment, Read read) {
  try {
    read();
    ADD_FAILURE() << "accepted: " << path;
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::invalid_input) << error.what();
    EXPECT_NE(std::string(error.what()).find("'" + path + "'"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
  }
}

}  // namespace

TEST(BoundedRead, DevicesFifosAndFoldersAreRefusedUnread) {
  testing::TempDir dir;
  const std::string zero = dir.file("config.json");
  std::filesystem::create_symlink("/dev/zero", zero);  // the issue: read without bound, 4.2 GB in 40 s
  const std::string fifo = dir.file("fifo.json");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);  // no writer: opening it for reading would block forever
  const auto start = Clock::now();
  expect_invalid_naming(zero, "character device", [&] { read_json_file(zero); });
  expect_invalid_naming(zero, "character device", [&] { read_file(zero); });
  expect_invalid_naming(fifo, "FIFO", [&] { read_json_file(fifo); });
  expect_invalid_naming(dir.path(), "folder", [&] { read_file(dir.path()); });
  EXPECT_LT(seconds_since(start), 1.0);
  try {
    read_file(dir.file("absent"));
    ADD_FAILURE();
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::io) << error.what();
  }
}

TEST(BoundedRead, FilesOverTheLimitAreRefusedNamingSizeAndLimit) {
  testing::TempDir dir;
  const std::string path = dir.file("big.json");
  std::ofstream(path) << "[" << std::string((std::size_t{1} << 20) + 10, ' ') << "]";
  expect_invalid_naming(path, "more than the 1048576 bytes",
                        [&] { read_json_file(path, kConfigFileLimits); });
  EXPECT_EQ(read_json_file(path), Json::array());  // under the general limit
  EXPECT_EQ(read_file(path, 2 << 20).size(), (std::size_t{1} << 20) + 12);
}

TEST(BoundedRead, DeepJsonIsRefusedBeforeParsingNamingTheFile) {
  testing::TempDir dir;
  const std::string path = dir.file("deep.json");
  std::string deep;
  for (int level = 0; level < 200000; ++level)
    deep += "{\"\":";                      // 4 bytes a level: 200,000 levels stay under the 1 MiB size limit
  deep += "1" + std::string(200000, '}');  // the reproduction: SIGSEGV in nlohmann's recursive copy
  std::ofstream(path) << deep;
  const auto start = Clock::now();
  expect_invalid_naming(path, "deeper than 64 levels", [&] { read_json_file(path); });
  expect_invalid_naming(path, "deeper than 32 levels", [&] { read_json_file(path, kConfigFileLimits); });
  EXPECT_LT(seconds_since(start), 1.0);
  // At the limit it parses; brackets inside strings (with escaped quotes) do not count.
  std::string at_limit = "\"[[\\\"{{\"";
  for (int level = 0; level < 32; ++level)
    at_limit = "[" + at_limit + "]";
  EXPECT_NO_THROW(parse_json_text(at_limit, "test", kConfigFileLimits));
  EXPECT_THROW(parse_json_text("[" + at_limit + "]", "test", kConfigFileLimits), Error);
  expect_invalid_naming("broken", "not valid JSON", [&] { parse_json_text("{\"a\": ", "'broken'"); });
}

TEST(ArchiveChecksum, UnsealedFilesAreAcceptedOnlyInFormatsThatPredateChecksums) {
  const std::string path = "/runs/x/checkpoint.pt";
  EXPECT_NO_THROW(require_checksum_for_format(path, "checkpoint", ChecksumStatus::verified, 2));
  EXPECT_NO_THROW(require_checksum_for_format(path, "checkpoint", ChecksumStatus::absent, 1));  // warns
  expect_invalid_naming(path, "checksum was stripped", [&] {
    require_checksum_for_format(path, "checkpoint", ChecksumStatus::absent, kFirstSealedArchiveFormat);
  });
}

}  // namespace ipj
