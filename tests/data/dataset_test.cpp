// Data set discovery and validation: IDX (gz and plain), CIFAR-10, the real Fashion-MNIST, and clear errors.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <cmath>
#include <filesystem>

#include "ipj/core/error.hpp"
#include "ipj/data/dataset.hpp"
#include "ipj/data/idx_reader.hpp"
#include "support/test_support.hpp"

namespace ipj::data {

TEST(Dataset, LoadsRealFashionMnistWithLimits) {
  const Dataset dataset = load_dataset(kDefaultDataDirectory, 1000, 500);
  EXPECT_EQ(dataset.name, "fashion-mnist");
  EXPECT_EQ(dataset.train.count, 1000);
  EXPECT_EQ(dataset.test.count, 500);
  EXPECT_EQ(dataset.train.pixels.size(), 1000u * 784u);
  EXPECT_EQ(dataset.train.channels, 1);
  // Fashion-MNIST's published training mean/std are ~0.286 / ~0.353; a 1000-sample prefix is close.
  EXPECT_NEAR(dataset.normalization.mean[0], 0.286, 0.02);
  EXPECT_NEAR(dataset.normalization.std[0], 0.353, 0.02);
}

TEST(Dataset, SyntheticIdxPlainAndGzip) {
  for (bool gzip : {false, true}) {
    testing::TempDir dir;
    testing::write_synthetic_idx_dataset(dir.path(), 40, 20, gzip);
    const Dataset dataset = load_dataset(dir.path());
    EXPECT_EQ(dataset.format, "idx");
    EXPECT_EQ(dataset.train.count, 40);
    EXPECT_EQ(dataset.test.count, 20);
    EXPECT_EQ(dataset.train.labels[13], 3);
  }
}

TEST(Dataset, CifarFolderAndNormalisation) {
  testing::TempDir dir;
  std::filesystem::create_directories(dir.file("cifar-10-batches-bin"));
  testing::write_synthetic_cifar_batch(dir.file("cifar-10-batches-bin/data_batch_1.bin"), 30);
  testing::write_synthetic_cifar_batch(dir.file("cifar-10-batches-bin/test_batch.bin"), 10);
  const Dataset dataset = load_dataset(dir.path());
  EXPECT_EQ(dataset.name, "cifar10");
  EXPECT_EQ(dataset.train.count, 30);
  ASSERT_EQ(dataset.normalization.mean.size(), 3u);
  // Exact mean of channel 0 computed independently.
  double sum = 0;
  for (int record = 0; record < 30; ++record)
    for (int index = 0; index < 1024; ++index)
      sum += ((record * 7 + index) % 256) / 255.0;
  EXPECT_NEAR(dataset.normalization.mean[0], sum / (30 * 1024), 1e-6);
}

TEST(Dataset, ErrorsNameTheProblem) {
  testing::TempDir dir;
  auto expect_error = [](const std::string& path, ErrorCategory category, const std::string& fragment) {
    try {
      load_dataset(path);
      FAIL() << path;
    } catch (const Error& error) {
      EXPECT_EQ(error.category(), category) << error.what();
      EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
    }
  };
  expect_error(dir.file("missing"), ErrorCategory::io, "does not exist");
  expect_error(dir.path(), ErrorCategory::invalid_input, "no data set found");

  testing::write_synthetic_idx_dataset(dir.path(), 20, 10, false);
  std::filesystem::remove(dir.file("t10k-labels-idx1-ubyte"));
  expect_error(dir.path(), ErrorCategory::invalid_input, "t10k-labels-idx1-ubyte");

  // Label out of range, and image/label count mismatch.
  testing::write_bytes(dir.file("t10k-labels-idx1-ubyte"),
                       encode_idx(IdxArray{{10}, std::vector<std::uint8_t>(10, 10)}));
  expect_error(dir.path(), ErrorCategory::invalid_input, "label 10 at index 0");
  testing::write_bytes(dir.file("t10k-labels-idx1-ubyte"),
                       encode_idx(IdxArray{{9}, std::vector<std::uint8_t>(9, 1)}));
  expect_error(dir.path(), ErrorCategory::invalid_input, "has 10 images but");
}

// Issue 22: the image and label headers are compared before any data is read, so that an images file whose
// header declares 3,000,000 images (and inflates to gigabytes) next to 20 labels costs nothing.
TEST(Dataset, ImageAndLabelCountsAreComparedBeforeAnyDataIsRead) {
  testing::TempDir dir;
  testing::write_synthetic_idx_dataset(dir.path(), 20, 10, true);
  const std::string images = dir.file("train-images-idx3-ubyte.gz");
  std::filesystem::remove(images);
  testing::write_gzip_bomb(images, encode_idx(IdxArray{{3000000, 28, 28}, {}}), std::uint64_t{2} << 30);
  rusage before{};
  ::getrusage(RUSAGE_SELF, &before);
  const auto start = std::chrono::steady_clock::now();
  try {
    load_dataset(dir.path());
    FAIL() << "loaded";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::invalid_input) << error.what();
    EXPECT_NE(std::string(error.what()).find(images + "' has 3000000 images but"), std::string::npos)
        << error.what();
  }
  rusage after{};
  ::getrusage(RUSAGE_SELF, &after);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 32 * 1024) << "KiB of peak RSS growth";
}

}  // namespace ipj::data
