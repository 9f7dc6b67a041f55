// IDX parsing: gzip and plain, and every way a file can be wrong gives a clear error naming the file.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <filesystem>

#include "ipj/core/atomic_file.hpp"
#include "ipj/core/error.hpp"
#include "ipj/data/dataset.hpp"
#include "ipj/data/idx_reader.hpp"
#include "support/test_support.hpp"

namespace ipj::data {
namespace {

IdxArray small_array() {
  return IdxArray{{3, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}};
}

// Expects read_idx_file(path) to throw invalid_input whose message contains the path and `fragment`.
void expect_invalid(const std::string& path, const std::string& fragment) {
  try {
    read_idx_file(path);
    FAIL() << "no error for " << path;
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::invalid_input) << error.what();
    EXPECT_NE(std::string(error.what()).find(path), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
  }
}

}  // namespace

TEST(IdxReader, ReadsPlainAndGzipIdentically) {
  testing::TempDir dir;
  testing::write_bytes(dir.file("a.idx"), encode_idx(small_array()));
  testing::write_gzip(dir.file("a.idx.gz"), encode_idx(small_array()));
  for (const auto& name : {"a.idx", "a.idx.gz"}) {
    const IdxArray array = read_idx_file(dir.file(name));
    EXPECT_EQ(array.dims, (std::vector<std::int64_t>{3, 2, 2}));
    EXPECT_EQ(array.values, small_array().values);
  }
}

TEST(IdxReader, ReadsTheRealFashionMnistLabels) {
  const IdxArray labels = read_idx_file(std::string(kDefaultDataDirectory) + "/t10k-labels-idx1-ubyte.gz");
  ASSERT_EQ(labels.dims, (std::vector<std::int64_t>{10000}));
  std::vector<int> per_class(10, 0);
  for (auto label : labels.values)
    per_class.at(label)++;
  for (int count : per_class)
    EXPECT_EQ(count, 1000);  // Fashion-MNIST's test set is balanced
}

TEST(IdxReader, WrongMagic) {
  testing::TempDir dir;
  auto bytes = encode_idx(small_array());
  bytes[0] = 0x1f;
  bytes[1] = 0x00;
  testing::write_bytes(dir.file("bad"), bytes);
  expect_invalid(dir.file("bad"), "magic");
}

TEST(IdxReader, UnsupportedTypeCode) {
  testing::TempDir dir;
  auto bytes = encode_idx(small_array());
  bytes[2] = 0x0D;  // float
  testing::write_bytes(dir.file("float.idx"), bytes);
  expect_invalid(dir.file("float.idx"), "type code");
}

TEST(IdxReader, TruncatedPayloadPlainAndGzip) {
  testing::TempDir dir;
  auto bytes = encode_idx(small_array());
  bytes.resize(bytes.size() - 5);
  testing::write_bytes(dir.file("short.idx"), bytes);
  expect_invalid(dir.file("short.idx"), "truncated");
  testing::write_gzip(dir.file("short.idx.gz"), bytes);
  expect_invalid(dir.file("short.idx.gz"), "truncated");
}

TEST(IdxReader, TruncatedGzipStream) {
  testing::TempDir dir;
  testing::write_gzip(dir.file("full.gz"), encode_idx(IdxArray{{2000}, std::vector<std::uint8_t>(2000, 7)}));
  std::string content = ipj::read_file(dir.file("full.gz"));
  content.resize(content.size() / 2);
  testing::write_bytes(dir.file("cut.gz"), std::vector<std::uint8_t>(content.begin(), content.end()));
  expect_invalid(dir.file("cut.gz"), "gzip");
}

TEST(IdxReader, TruncatedHeaderAndTrailingBytesAndZeroDims) {
  testing::TempDir dir;
  testing::write_bytes(dir.file("tiny"), {0, 0});
  expect_invalid(dir.file("tiny"), "too short");
  testing::write_bytes(dir.file("header"), {0, 0, 8, 3, 0, 0, 0, 1});
  expect_invalid(dir.file("header"), "header");
  auto bytes = encode_idx(small_array());
  bytes.push_back(42);
  testing::write_bytes(dir.file("trailing"), bytes);
  expect_invalid(dir.file("trailing"), "unexpected bytes");
  testing::write_bytes(dir.file("zero"), encode_idx(IdxArray{{0}, {}}));
  expect_invalid(dir.file("zero"), "size 0");
}

TEST(IdxReader, GzipBombFailsFastWithBoundedMemory) {
  testing::TempDir dir;
  const std::string path = dir.file("train-images-idx3-ubyte.gz");
  // The header declares 10 images of 28x28 (7840 bytes); the stream inflates to 4 GiB.
  const std::vector<std::uint8_t> header = encode_idx(IdxArray{{10, 28, 28}, {}});
  const std::uint64_t inflated = testing::write_gzip_bomb(path, header, std::uint64_t{4} << 30);
  ASSERT_GE(inflated, std::uint64_t{4} << 30);
  ASSERT_LT(std::filesystem::file_size(path), std::uint64_t{8} << 20);
  rusage before{};
  ::getrusage(RUSAGE_SELF, &before);
  const auto start = std::chrono::steady_clock::now();
  expect_invalid(path, "unexpected bytes after");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  rusage after{};
  ::getrusage(RUSAGE_SELF, &after);
  EXPECT_LT(seconds, 1.0);
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 64 * 1024) << "KiB of peak RSS growth";  // ru_maxrss: KiB
}

TEST(IdxReader, HeaderPromisingMoreThanTheFileHoldsAllocatesOnlyWhatArrives) {
  testing::TempDir dir;
  // 2^33 declared bytes (8 GiB), a few bytes present: truncated, without allocating the declared size.
  testing::write_gzip(dir.file("liar.gz"), encode_idx(IdxArray{{1 << 21, 64, 64}, {}}));
  rusage before{};
  ::getrusage(RUSAGE_SELF, &before);
  expect_invalid(dir.file("liar.gz"), "truncated");
  rusage after{};
  ::getrusage(RUSAGE_SELF, &after);
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 64 * 1024) << "KiB of peak RSS growth";
}

TEST(IdxReader, MissingFileIsIoError) {
  try {
    read_idx_file("/nonexistent/ipj/file.gz");
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::io);
    EXPECT_NE(std::string(error.what()).find("/nonexistent/ipj/file.gz"), std::string::npos);
  }
}

}  // namespace ipj::data
