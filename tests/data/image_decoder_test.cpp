// PNG/JPEG decoding and bilinear resizing against Pillow (golden files written at test time by Debian's
// python3-pil): every PNG/JPEG mode, corrupt and empty files, and Pillow's BILINEAR resize byte for byte.
#include <gtest/gtest.h>
#include <zlib.h>

#include <nlohmann/json.hpp>

#include "ipj/core/atomic_file.hpp"
#include "ipj/core/error.hpp"
#include "ipj/data/image_decoder.hpp"
#include "ipj/data/image_resize.hpp"
#include "support/test_support.hpp"

namespace ipj::data {
namespace {

// Runs tests/data/python/make_image_cases.py KIND into `directory`; fails the test when Python fails.
nlohmann::json make_cases(const std::string& kind, const std::string& directory) {
  const auto result = testing::run_process(testing::python_path() + " " + testing::test_source_dir() +
                                           "/data/python/make_image_cases.py " + kind + " " + directory);
  EXPECT_EQ(result.exit_code, 0) << result.err;
  return nlohmann::json::parse(read_file(directory + "/manifest.json"));
}

std::vector<std::uint8_t> read_bytes(const std::string& path) {
  const std::string content = read_file(path);
  return {content.begin(), content.end()};
}

int count_differences(const std::vector<std::uint8_t>& actual, const std::vector<std::uint8_t>& expected,
                      int* largest) {
  int differences = 0;
  *largest = 0;
  for (size_t index = 0; index < std::min(actual.size(), expected.size()); ++index) {
    const int difference = std::abs(int(actual[index]) - int(expected[index]));
    if (difference > 0) ++differences;
    *largest = std::max(*largest, difference);
  }
  return differences;
}

// Expects `action` to throw ipj::Error(invalid_input) whose message names `path` and contains `fragment`.
template <typename Action>
void expect_invalid(Action action, const std::string& path, const std::string& fragment) {
  try {
    action();
    ADD_FAILURE() << "no error for " << path;
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::invalid_input) << error.what();
    EXPECT_NE(std::string(error.what()).find(path), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
  }
}

}  // namespace

TEST(ImageDecoder, MatchesPillowForEveryMode) {
  testing::TempDir dir;
  const auto manifest = make_cases("decoder", dir.path());
  ASSERT_EQ(manifest.size(), 13u);
  for (const auto& [name, info] : manifest.items()) {
    const std::string path = dir.file(name);
    const ImageHeader header = read_image_header(path, read_file(path));
    EXPECT_EQ(header.height, info["height"].get<int>()) << name;
    EXPECT_EQ(header.width, info["width"].get<int>()) << name;
    const std::string mode = info["mode"];
    EXPECT_EQ(header.channels, mode == "L" || mode == "LA" || mode.rfind("I", 0) == 0 ? 1 : 3) << name;
    for (const auto& [channels, suffix] : {std::pair{1, ".L.bin"}, std::pair{3, ".RGB.bin"}}) {
      const DecodedImage image = decode_image_file(path, channels);
      ASSERT_EQ(image.channels, channels);
      ASSERT_EQ(image.height, header.height);
      ASSERT_EQ(image.width, header.width);
      const auto expected = read_bytes(dir.file(name + suffix));
      ASSERT_EQ(image.pixels.size(), expected.size()) << name;
      int largest = 0;
      // Exact: the same libjpeg-turbo (ISLOW DCT, fancy upsampling) and PIL's integer conversions.
      EXPECT_EQ(count_differences(image.pixels, expected, &largest), 0)
          << name << " as " << channels << " channel(s): largest difference " << largest;
    }
  }
}

TEST(ImageDecoder, CorruptTruncatedEmptyAndForeignFilesNameTheFile) {
  testing::TempDir dir;
  make_cases("decoder", dir.path());
  const std::string png = read_file(dir.file("rgb.png")), jpeg = read_file(dir.file("rgb.jpg"));
  write_file_atomically(dir.file("truncated.png"), png.substr(0, png.size() / 2));
  write_file_atomically(dir.file("truncated.jpg"), jpeg.substr(0, jpeg.size() / 2));
  write_file_atomically(dir.file("empty.png"), "");
  write_file_atomically(dir.file("text.jpg"), "not an image at all\n");
  std::string noise(300, '\0');
  for (size_t index = 0; index < noise.size(); ++index)
    noise[index] = static_cast<char>((index * 131 + 17) % 251);
  write_file_atomically(dir.file("noise.png"), noise);
  write_file_atomically(dir.file("png-signature-then-noise.png"), png.substr(0, 8) + noise);
  write_file_atomically(dir.file("jpeg-marker-then-noise.jpg"), jpeg.substr(0, 3) + noise);

  expect_invalid([&] { decode_image_file(dir.file("truncated.png"), 3); }, "truncated.png", "PNG");
  expect_invalid([&] { decode_image_file(dir.file("truncated.jpg"), 3); }, "truncated.jpg", "JPEG");
  expect_invalid([&] { decode_image_file(dir.file("empty.png"), 1); }, "empty.png", "empty (0 bytes)");
  expect_invalid([&] { decode_image_file(dir.file("text.jpg"), 1); }, "text.jpg", "not a PNG or JPEG");
  expect_invalid([&] { decode_image_file(dir.file("noise.png"), 1); }, "noise.png", "not a PNG or JPEG");
  for (const char* name : {"png-signature-then-noise.png", "jpeg-marker-then-noise.jpg"}) {
    expect_invalid([&] { read_image_header(dir.file(name), read_file(dir.file(name))); }, name, "damaged");
    expect_invalid([&] { decode_image_file(dir.file(name), 1); }, name, "image '");
  }
  try {
    decode_image_file(dir.file("missing.png"), 1);
    ADD_FAILURE() << "no error for a missing file";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::io);
    EXPECT_NE(std::string(error.what()).find("missing.png"), std::string::npos) << error.what();
  }
}

// Issue 22: a PNG header is not trusted with memory. A 4x4 PNG whose IHDR (with a valid CRC) declares
// 16384x16384 pixels (2^28, the per-image limit) would have had 256 MiB allocated before libpng found the
// data missing; its 80-odd bytes can hold at most bytes x 8 x 1032 pixels, so it is refused from the header.
TEST(ImageDecoder, PngHeaderDeclaringMorePixelsThanTheFileCanHoldIsRefused) {
  testing::TempDir dir;
  testing::write_png(dir.file("small.png"), 4, 4, 1, std::vector<std::uint8_t>(16, 128));
  std::string png = read_file(dir.file("small.png"));
  ASSERT_EQ(png.compare(12, 4, "IHDR"), 0);
  for (const int offset : {16, 20}) {  // width, height: big-endian 16384
    png[static_cast<std::size_t>(offset)] = 0;
    png[static_cast<std::size_t>(offset + 1)] = 0;
    png[static_cast<std::size_t>(offset + 2)] = 0x40;
    png[static_cast<std::size_t>(offset + 3)] = 0;
  }
  const auto crc = static_cast<std::uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(png.data() + 12), 17));
  for (int index = 0; index < 4; ++index)
    png[static_cast<std::size_t>(29 + index)] = static_cast<char>(crc >> (24 - 8 * index));
  const std::string path = dir.file("liar.png");
  write_file_atomically(path, png);
  expect_invalid([&] { read_image_header(path, png); }, "liar.png", "16384x16384 pixels, more than its");
  expect_invalid([&] { decode_image_file(path, 1); }, "liar.png", "can hold");
}

TEST(ImageDecoder, ExtensionsAndChannelConversion) {
  for (const char* name : {"a.png", "b.PNG", "dir.x/c.jpg", "d.JPEG", "e.Jpg"})
    EXPECT_TRUE(has_image_extension(name)) << name;
  for (const char* name : {"a.bmp", "b.png.txt", "dir.png/readme", "png", ".jpgx"})
    EXPECT_FALSE(has_image_extension(name)) << name;
  const std::uint8_t rgb[6] = {255, 0, /*green*/ 0, 255, /*blue*/ 0, 0};  // 2 pixels: red, green
  std::uint8_t grey[2];
  convert_channels(rgb, 3, 1, 2, grey);
  EXPECT_EQ(grey[0], 76);   // (19595 * 255 + 32768) >> 16: PIL's L of pure red
  EXPECT_EQ(grey[1], 150);  // pure green
  std::uint8_t back[6];
  convert_channels(grey, 1, 3, 2, back);
  EXPECT_EQ(std::vector<std::uint8_t>(back, back + 6),
            (std::vector<std::uint8_t>{76, 150, 76, 150, 76, 150}));
}

TEST(ImageResize, MatchesPillowBilinearExactly) {
  testing::TempDir dir;
  const auto cases = make_cases("resize", dir.path());
  ASSERT_EQ(cases.size(), 14u);
  for (const auto& item : cases) {
    const auto source = read_bytes(dir.file(item["source"]));
    const auto expected = read_bytes(dir.file(item["expected"]));
    const int channels = item["channels"], target_height = item["target_height"],
              target_width = item["target_width"];
    std::vector<std::uint8_t> actual(static_cast<size_t>(channels * target_height * target_width));
    resize_bilinear(source.data(), channels, item["height"], item["width"], actual.data(), target_height,
                    target_width);
    ASSERT_EQ(actual.size(), expected.size());
    int largest = 0;
    // Tolerance 0: the same fixed-point arithmetic as Pillow 9.4's Resample.c.
    EXPECT_EQ(count_differences(actual, expected, &largest), 0)
        << item["expected"] << ": largest difference " << largest;
  }
}

}  // namespace ipj::data
