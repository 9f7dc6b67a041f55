// CIFAR-10 binary batches: records parsed in order; bad sizes and labels rejected with the file name.
#include <gtest/gtest.h>

#include "ipj/core/error.hpp"
#include "ipj/data/cifar_reader.hpp"
#include "support/test_support.hpp"

namespace ipj::data {

TEST(CifarReader, ParsesRecords) {
  testing::TempDir dir;
  testing::write_synthetic_cifar_batch(dir.file("data_batch_1.bin"), 25);
  testing::write_synthetic_cifar_batch(dir.file("data_batch_2.bin"), 5);
  const ImageSet images = read_cifar_batches({dir.file("data_batch_1.bin"), dir.file("data_batch_2.bin")});
  EXPECT_EQ(images.count, 30);
  EXPECT_EQ(images.channels, 3);
  EXPECT_EQ(images.height, 32);
  EXPECT_EQ(images.labels[13], 3);
  EXPECT_EQ(images.labels[27], 2);  // second file restarts at record 0: 2 % 10
  EXPECT_EQ(images.pixels[13 * 3072 + 5], static_cast<std::uint8_t>((13 * 7 + 5) % 256));
}

TEST(CifarReader, RejectsPartialRecordEmptyFileAndBadLabel) {
  testing::TempDir dir;
  testing::write_bytes(dir.file("partial.bin"), std::vector<std::uint8_t>(3073 + 100, 1));
  testing::write_bytes(dir.file("empty.bin"), {});
  std::vector<std::uint8_t> bad(3073 * 2, 0);
  bad[3073] = 11;  // label of record 1
  testing::write_bytes(dir.file("label.bin"), bad);
  for (const auto& [name, fragment] :
       {std::pair{"partial.bin", "multiple of the 3073-byte"}, std::pair{"empty.bin", "empty"},
        std::pair{"label.bin", "record 1 has label 11"}}) {
    ImageSet images;
    try {
      read_cifar_batch(dir.file(name), images);
      FAIL() << name;
    } catch (const Error& error) {
      EXPECT_EQ(error.category(), ErrorCategory::invalid_input);
      EXPECT_NE(std::string(error.what()).find(dir.file(name)), std::string::npos) << error.what();
      EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
    }
  }
}

}  // namespace ipj::data
