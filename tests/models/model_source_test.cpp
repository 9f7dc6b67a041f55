// --model parsing (zoo name vs TorchScript file), short names and file fingerprints.
#include <gtest/gtest.h>

#include "ipj/core/atomic_file.hpp"
#include "ipj/core/error.hpp"
#include "ipj/models/model_source.hpp"
#include "support/test_support.hpp"

namespace ipj::models {

TEST(ModelSource, ZooNamesWinFilesAreFilesAndUnknownNamesListTheZoo) {
  testing::TempDir dir;
  write_file_atomically(dir.file("net.pt"), "bytes");
  const ModelSource zoo = parse_model_source("cnn", {});
  EXPECT_FALSE(zoo.is_file());
  EXPECT_EQ(zoo.zoo_name, "cnn");
  const ModelSource file = parse_model_source(dir.file("net.pt"), {784});
  EXPECT_TRUE(file.is_file());
  EXPECT_EQ(file.file, dir.file("net.pt"));
  EXPECT_EQ(file.input_shape, std::vector<std::int64_t>{784});
  EXPECT_EQ(short_name(file), "net");
  EXPECT_EQ(short_name(zoo), "cnn");
  auto category_of = [](const std::string& text, std::vector<std::int64_t> shape) {
    try {
      parse_model_source(text, shape);
    } catch (const Error& error) {
      return error.category();
    }
    return ErrorCategory::internal;
  };
  EXPECT_EQ(category_of("vgg", {}), ErrorCategory::usage);
  EXPECT_EQ(category_of(dir.file("missing.pt"), {}), ErrorCategory::io);
  EXPECT_EQ(category_of("mlp", {1, 28, 28}), ErrorCategory::usage);  // --input-shape is for files
}

TEST(ModelSource, FingerprintChangesWithTheBytes) {
  testing::TempDir dir;
  write_file_atomically(dir.file("a"), "first version");
  const FileFingerprint first = fingerprint_file(dir.file("a"));
  EXPECT_EQ(first.bytes, 13);
  EXPECT_EQ(first.xxh3_64.size(), 16u);
  EXPECT_EQ(fingerprint_file(dir.file("a")).xxh3_64, first.xxh3_64);
  write_file_atomically(dir.file("a"), "first versioN");
  EXPECT_NE(fingerprint_file(dir.file("a")).xxh3_64, first.xxh3_64);
}

}  // namespace ipj::models
