// Atomic writes replace whole files, create parents, clean up after failing writers, and report clear errors.
#include <gtest/gtest.h>

#include <filesystem>

#include "ipj/core/atomic_file.hpp"
#include "ipj/core/error.hpp"
#include "ipj/core/json_io.hpp"
#include "support/test_support.hpp"

namespace ipj {

TEST(AtomicFile, WritesAndReplacesWholeContent) {
  testing::TempDir dir;
  const std::string path = dir.file("nested/folder/out.txt");
  write_file_atomically(path, "first version, long content");
  EXPECT_EQ(read_file(path), "first version, long content");
  write_file_atomically(path, "second");
  EXPECT_EQ(read_file(path), "second");
  // No temporary files are left behind.
  int entries = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir.file("nested/folder")))
    ++entries;
  EXPECT_EQ(entries, 1);
}

TEST(AtomicFile, FailingWriterLeavesOldFileIntact) {
  testing::TempDir dir;
  const std::string path = dir.file("keep.txt");
  write_file_atomically(path, "precious");
  EXPECT_THROW(replace_file_atomically(path,
                                       [](const std::string& temporary) {
                                         write_file_atomically(temporary, "half");
                                         throw Error(ErrorCategory::io, "disk full");
                                       }),
               Error);
  EXPECT_EQ(read_file(path), "precious");
  int entries = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir.path()))
    ++entries;
  EXPECT_EQ(entries, 1);
}

TEST(AtomicFile, UnwritableLocationIsAnIoErrorNamingThePath) {
  try {
    write_file_atomically("/proc/ipj-cannot-write-here/x.json", "{}");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::io);
    EXPECT_NE(std::string(error.what()).find("/proc/ipj-cannot-write-here"), std::string::npos)
        << error.what();
  }
}

TEST(JsonFile, RoundTripsAndRejectsInvalidJsonWithFileName) {
  testing::TempDir dir;
  const std::string path = dir.file("r.json");
  write_json_file(path, Json{{"schema_version", kResultsSchemaVersion}, {"b", 2}, {"a", 1}});
  const Json back = read_json_file(path);
  EXPECT_EQ(back["schema_version"], kResultsSchemaVersion);
  EXPECT_EQ(back.begin().key(), "schema_version");  // insertion order kept
  write_file_atomically(path, "{not json");
  try {
    read_json_file(path);
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::invalid_input);
    EXPECT_NE(std::string(error.what()).find(path), std::string::npos);
  }
  EXPECT_THROW(read_file(dir.file("missing.json")), Error);
}

}  // namespace ipj
