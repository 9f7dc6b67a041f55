// Checked files: a flipped byte anywhere in a sealed archive or results file is refused naming the file;
// files without a checksum still load; stale temporaries of killed writers are removed; --out is probed up
// front.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "ipj/core/atomic_file.hpp"
#include "ipj/core/checked_file.hpp"
#include "ipj/core/error.hpp"
#include "ipj/core/json_io.hpp"
#include "support/test_support.hpp"

namespace ipj {
namespace {

// Random bytes followed by a zip End Of Central Directory record without comment: the shape of every archive
// LibTorch writes, as far as sealing is concerned.
std::string fake_zip(std::size_t payload_bytes) {
  std::mt19937 random(42);
  std::string bytes;
  for (std::size_t index = 0; index < payload_bytes; ++index)
    bytes.push_back(static_cast<char>(random() & 0xff));
  bytes += std::string("PK\x05\x06", 4) + std::string(18, '\0');
  return bytes;
}

template <typename Load>
void expect_refused_naming(const std::string& path, Load load, const std::string& context) {
  try {
    load();
    ADD_FAILURE() << "damaged file accepted: " << context;
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::invalid_input) << context << ": " << error.what();
    EXPECT_NE(std::string(error.what()).find(path), std::string::npos) << error.what();
  }
}

}  // namespace

TEST(ZipChecksum, SealedArchiveVerifiesAndEveryFlippedByteIsRefused) {
  testing::TempDir dir;
  const std::string path = dir.file("model.pt");
  const std::string original = fake_zip(300);
  write_file_atomically(path, original);
  EXPECT_EQ(verify_zip_archive(path), ChecksumStatus::absent);  // unsealed: accepted as "no checksum"
  seal_zip_archive(path);
  const std::string sealed = read_file(path);
  ASSERT_EQ(sealed.size(), original.size() + 26);
  EXPECT_EQ(sealed.substr(sealed.size() - 26, 10), "ipj-xxh64:");
  EXPECT_EQ(static_cast<unsigned char>(sealed[original.size() - 2]), 26);  // the zip comment length
  EXPECT_EQ(verify_zip_archive(path), ChecksumStatus::verified);
  for (std::size_t position = 0; position < sealed.size(); ++position) {
    for (const unsigned char mask : {0x01, 0xff}) {
      std::string damaged = sealed;
      damaged[position] = static_cast<char>(damaged[position] ^ mask);
      write_file_atomically(path, damaged);
      expect_refused_naming(
          path, [&] { verify_zip_archive(path); }, "byte " + std::to_string(position));
    }
  }
}

TEST(ZipChecksum, SealingRefusesFilesThatAreNotCommentlessZips) {
  testing::TempDir dir;
  write_file_atomically(dir.file("text"), "not a zip at all, just some text");
  EXPECT_THROW(seal_zip_archive(dir.file("text")), Error);
  EXPECT_EQ(verify_zip_archive(dir.file("text")), ChecksumStatus::absent);
  EXPECT_THROW(verify_zip_archive(dir.file("missing")), Error);
}

TEST(JsonChecksum, RoundTripsWithoutTheKeyAndEveryFlippedByteIsRefused) {
  testing::TempDir dir;
  const std::string path = dir.file("results.json");
  const Json value = {{"schema_version", kResultsSchemaVersion},
                      {"kind", "train"},
                      {"final", {{"test_acc", 0.8814}, {"energy_j", 287.4}}},
                      {"epochs", Json::array({1, 2})}};
  write_json_file(path, value);
  const std::string text = read_file(path);
  EXPECT_NE(text.find("\"checksum\": \"xxh64:"), std::string::npos) << text;
  EXPECT_EQ(read_json_file(path), value);  // the checksum key is verified and removed
  for (std::size_t position = 0; position < text.size(); ++position) {
    for (const unsigned char mask : {0x01, 0x20, 0xff}) {
      std::string damaged = text;
      damaged[position] = static_cast<char>(damaged[position] ^ mask);
      write_file_atomically(path, damaged);
      expect_refused_naming(
          path, [&] { read_json_file(path); }, "byte " + std::to_string(position) + ": " + damaged);
    }
  }
}

TEST(JsonChecksum, FilesWithoutChecksumLoadAndReformattedOnesAreRefusedWithAHint) {
  testing::TempDir dir;
  const std::string path = dir.file("config.json");
  write_file_atomically(path, "{\"max_batch_size\": 8}");
  EXPECT_EQ(read_json_file(path)["max_batch_size"], 8);
  write_json_file(path, Json{{"a", 1}});
  const Json sealed = Json::parse(read_file(path));
  write_file_atomically(path, sealed.dump());  // compact: same content, other bytes
  try {
    read_json_file(path);
    FAIL() << "a reformatted sealed file was accepted";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("remove the \"checksum\" key"), std::string::npos)
        << error.what();
  }
}

TEST(StaleTemporaries, AKilledWritersTemporaryIsRemovedOnTheNextWrite) {
  testing::TempDir dir;
  const std::string path = dir.file("results.json");
  // A real writer killed with SIGKILL between creating its temporary and renaming it.
  const pid_t writer = ::fork();
  ASSERT_GE(writer, 0);
  if (writer == 0) {
    replace_file_atomically(path, [](const std::string& temporary) {
      std::ofstream(temporary) << "partial";
      ::pause();  // killed here
    });
    ::_exit(0);
  }
  const std::string stale = path + ".tmp." + std::to_string(writer);
  for (int attempt = 0; attempt < 500 && !std::filesystem::exists(stale); ++attempt)
    ::usleep(10000);
  ASSERT_TRUE(std::filesystem::exists(stale));
  ::kill(writer, SIGKILL);
  ::waitpid(writer, nullptr, 0);
  // A temporary of a live writer (this test's parent process stands in for one) must stay.
  const std::string live = path + ".tmp." + std::to_string(::getppid());
  write_file_atomically(live, "in progress");
  write_json_file(path, Json{{"a", 1}});
  EXPECT_FALSE(std::filesystem::exists(stale));
  EXPECT_TRUE(std::filesystem::exists(live));
  EXPECT_EQ(read_json_file(path)["a"], 1);
}

TEST(WritableOutput, ProbesFoldersAndFilesBeforeAnyWork) {
  testing::TempDir dir;
  require_writable_folder(dir.file("new/run"), "--out");
  EXPECT_TRUE(std::filesystem::is_directory(dir.file("new/run")));
  EXPECT_TRUE(std::filesystem::is_empty(dir.file("new/run")));  // the probe file is gone
  require_writable_file(dir.file("models/model.pt"), "--out");
  EXPECT_FALSE(std::filesystem::exists(dir.file("models/model.pt")));
  auto expect_error = [](const std::function<void()>& check, ErrorCategory category,
                         const std::string& path) {
    try {
      check();
      ADD_FAILURE() << "no error for " << path;
    } catch (const Error& error) {
      EXPECT_EQ(error.category(), category) << error.what();
      EXPECT_NE(std::string(error.what()).find("--out"), std::string::npos) << error.what();
      EXPECT_NE(std::string(error.what()).find(path), std::string::npos) << error.what();
    }
  };
  const std::string loop = dir.file("loop");
  std::filesystem::create_symlink(loop, loop);
  expect_error([&] { require_writable_folder(loop, "--out"); }, ErrorCategory::io, loop);
  expect_error([&] { require_writable_file(loop, "--out"); }, ErrorCategory::io, loop);
  expect_error([&] { require_writable_folder("/proc/ipj-not-here/run", "--out"); }, ErrorCategory::io,
               "/proc/ipj-not-here/run");
  write_file_atomically(dir.file("plain"), "x");
  expect_error([&] { require_writable_folder(dir.file("plain/run"), "--out"); }, ErrorCategory::io,
               dir.file("plain/run"));
  expect_error([&] { require_writable_folder(dir.file("plain"), "--out"); }, ErrorCategory::usage,
               dir.file("plain"));
  expect_error([&] { require_writable_file(dir.path(), "--out"); }, ErrorCategory::usage, dir.path());
}

}  // namespace ipj
