// Image folders: torchvision's class and sample order and pixels (golden files from torchvision at test
// time), channels from the data, cached vs streamed decoding, --skip-bad-images, layout errors, --limit.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "ipj/core/atomic_file.hpp"
#include "ipj/core/error.hpp"
#include "ipj/data/batch_loader.hpp"
#include "ipj/data/dataset.hpp"
#include "ipj/data/image_folder.hpp"
#include "support/test_support.hpp"

namespace ipj::data {
namespace fs = std::filesystem;
namespace {

// A grey image whose pixels encode (label, index): value = label * 20 + index at every position.
void write_sample(const std::string& path, int label, int index, int size = 6, int channels = 1) {
  testing::write_png(path, size, size, channels,
                     std::vector<std::uint8_t>(static_cast<size_t>(size * size * channels),
                                               static_cast<std::uint8_t>(label * 20 + index)));
}

// DIR/train/<class>/NNN.png (counts per class) and DIR/test/<class>/NNN.png (2 each).
void write_folder(const std::string& root, const std::vector<std::pair<std::string, int>>& classes) {
  for (size_t label = 0; label < classes.size(); ++label) {
    for (int index = 0; index < classes[label].second; ++index)
      write_sample(root + "/train/" + classes[label].first + "/" + std::to_string(100 + index) + ".png",
                   static_cast<int>(label), index);
    for (int index = 0; index < 2; ++index)
      write_sample(root + "/test/" + classes[label].first + "/" + std::to_string(100 + index) + ".png",
                   static_cast<int>(label), index);
  }
}

DataOptions streamed_options() {
  DataOptions options;
  options.image_cache_mb = 0;
  options.decode_threads = 2;
  return options;
}

void expect_load_error(const std::string& directory, const DataOptions& options, ErrorCategory category,
                       const std::string& fragment) {
  try {
    load_dataset(directory, 0, 0, options);
    ADD_FAILURE() << "no error, expected: " << fragment;
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), category) << error.what();
    EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
  }
}

std::vector<torch::Tensor> epoch_batches(const Dataset& dataset, bool augment) {
  LoaderOptions options;
  options.batch_size = 4;
  options.seed = 3;
  options.epoch = 1;
  options.augment = augment;
  BatchLoader loader(dataset.train, dataset.normalization, options);
  std::vector<torch::Tensor> batches;
  while (auto batch = loader.next()) {
    batches.push_back(batch->images.clone());
    batches.push_back(batch->labels.clone());
  }
  return batches;
}

}  // namespace

TEST(ImageFolder, MatchesTorchvisionImageFolderOrderAndPixels) {
  testing::TempDir dir;
  const auto cases = testing::run_process(testing::python_path() + " " + testing::test_source_dir() +
                                          "/data/python/make_image_cases.py folder " + dir.path());
  ASSERT_EQ(cases.exit_code, 0) << cases.err;
  const auto manifest = nlohmann::json::parse(read_file(dir.file("manifest.json")));
  DataOptions options;
  options.channels = 3;                // torchvision's loader converts every image to RGB
  options.resize = ImageSize{20, 24};  // transforms.Resize((20, 24))
  for (const std::int64_t cache_mb : {std::int64_t{4096}, std::int64_t{0}}) {
    options.image_cache_mb = cache_mb;
    const Dataset dataset = load_dataset(dir.file("images"), 0, 0, options);
    EXPECT_EQ(dataset.format, "image-folder");
    EXPECT_EQ(dataset.class_names, manifest["train"]["classes"].get<std::vector<std::string>>());
    EXPECT_EQ(dataset.train.streamed(), cache_mb == 0);
    for (const auto& [split, images] :
         {std::pair{"train", &dataset.train}, std::pair{"test", &dataset.test}}) {
      const auto& samples = manifest[split]["samples"];
      ASSERT_EQ(images->count, static_cast<std::int64_t>(samples.size())) << split;
      for (size_t index = 0; index < samples.size(); ++index) {
        EXPECT_EQ(fs::relative(images->files->paths[index], dir.file("images")).string(),
                  samples[index][0].get<std::string>());
        EXPECT_EQ(images->labels[index], samples[index][1].get<int>());
      }
      // Pixels through the loader (raw [0,1] values * 255) against torchvision's uint8 tensors: exact.
      const std::string expected = read_file(dir.file(std::string(split) + ".RGB.bin"));
      std::int64_t offset = 0, differences = 0;
      for_each_pixel_batch_in_order(*images, 3, 0, [&](const torch::Tensor& pixels, const torch::Tensor&) {
        const torch::Tensor bytes = (pixels * 255).round().to(torch::kUInt8).contiguous();
        for (std::int64_t index = 0; index < bytes.numel(); ++index)
          differences +=
              bytes.data_ptr<std::uint8_t>()[index] != static_cast<std::uint8_t>(expected[offset + index]);
        offset += bytes.numel();
      });
      EXPECT_EQ(offset, static_cast<std::int64_t>(expected.size()));
      EXPECT_EQ(differences, 0) << split << " (cache " << cache_mb << " MB)";
    }
  }
}

TEST(ImageFolder, ChannelsFromTheDataOrTheFlag) {
  testing::TempDir dir;
  write_folder(dir.path(), {{"cat", 3}, {"dog", 3}});
  const Dataset grey = load_dataset(dir.path(), 0, 0, DataOptions{});
  EXPECT_EQ(grey.train.channels, 1);
  EXPECT_EQ(grey.options.channels, 1);
  EXPECT_EQ(grey.class_names, (std::vector<std::string>{"cat", "dog"}));
  EXPECT_EQ(grey.train.count, 6);
  EXPECT_EQ(grey.test.count, 4);
  EXPECT_EQ(grey.num_classes, 2);
  EXPECT_EQ(grey.train.pixels[36 * 4], 20 + 1);            // sample 4 = dog/101.png: label 1, index 1
  write_sample(dir.file("test/dog/102.png"), 1, 2, 6, 3);  // one RGB image makes the set RGB
  const Dataset colour = load_dataset(dir.path(), 0, 0, DataOptions{});
  EXPECT_EQ(colour.train.channels, 3);
  DataOptions one;
  one.channels = 1;
  EXPECT_EQ(load_dataset(dir.path(), 0, 0, one).test.channels, 1);
  const Json summary = to_json(colour);
  EXPECT_EQ(summary["classes"], Json({"cat", "dog"}));
  EXPECT_EQ(summary["input_shape"], Json({3, 6, 6}));
  EXPECT_EQ(summary["skipped_images"], 0);
  EXPECT_EQ(summary["storage"], "memory");
}

TEST(ImageFolder, StreamedAndCachedGiveTheSameBatchesAndStatistics) {
  testing::TempDir dir;
  write_folder(dir.path(), {{"a", 5}, {"b", 4}, {"c", 6}});
  const Dataset cached = load_dataset(dir.path(), 0, 0, DataOptions{});
  const Dataset streamed = load_dataset(dir.path(), 0, 0, streamed_options());
  ASSERT_FALSE(cached.train.streamed());
  ASSERT_TRUE(streamed.train.streamed());
  EXPECT_TRUE(streamed.train.pixels.empty());
  EXPECT_EQ(cached.normalization.mean, streamed.normalization.mean);  // bit-identical sums
  EXPECT_EQ(cached.normalization.std, streamed.normalization.std);
  EXPECT_EQ(to_json(streamed)["storage"], "streamed");
  for (const bool augment : {false, true}) {
    const auto first = epoch_batches(cached, augment), second = epoch_batches(streamed, augment);
    ASSERT_EQ(first.size(), second.size());
    for (size_t index = 0; index < first.size(); ++index)
      EXPECT_TRUE(torch::equal(first[index], second[index])) << "batch tensor " << index;
  }
  // Shuffling is deterministic and independent of the storage: epoch 1 differs from epoch 0.
  EXPECT_TRUE(torch::equal(epoch_batches(cached, false)[1], epoch_batches(streamed, false)[1]));
}

TEST(ImageFolder, OrderDoesNotDependOnCreationOrder) {
  testing::TempDir first, second;
  write_folder(first.path(), {{"x", 4}, {"y", 3}});
  // The same files created in the opposite order (directory listings return them differently).
  for (int label = 1; label >= 0; --label)
    for (int index = (label == 0 ? 4 : 3) - 1; index >= 0; --index)
      write_sample(second.file(std::string("train/") + (label == 0 ? "x" : "y") + "/" +
                               std::to_string(100 + index) + ".png"),
                   label, index);
  for (int label = 1; label >= 0; --label)
    for (int index = 1; index >= 0; --index)
      write_sample(second.file(std::string("test/") + (label == 0 ? "x" : "y") + "/" +
                               std::to_string(100 + index) + ".png"),
                   label, index);
  const Dataset one = load_dataset(first.path(), 0, 0, DataOptions{});
  const Dataset two = load_dataset(second.path(), 0, 0, DataOptions{});
  EXPECT_EQ(one.train.pixels, two.train.pixels);
  EXPECT_EQ(one.train.labels, two.train.labels);
  EXPECT_EQ(one.test.pixels, two.test.pixels);
}

TEST(ImageFolder, SkipBadImagesCountsThemOtherwiseTheErrorNamesTheFile) {
  testing::TempDir dir;
  write_folder(dir.path(), {{"a", 4}, {"b", 4}});
  const std::string good = read_file(dir.file("train/a/100.png"));
  write_file_atomically(dir.file("train/a/050-empty.png"), "");
  write_file_atomically(dir.file("train/b/050-truncated.png"), good.substr(0, good.size() - 20));
  write_file_atomically(dir.file("test/b/050-noise.jpg"), std::string(500, '\x17'));
  for (const DataOptions& base : {DataOptions{}, streamed_options()}) {
    expect_load_error(dir.path(), base, ErrorCategory::invalid_input, "050-empty.png");
    expect_load_error(dir.path(), base, ErrorCategory::invalid_input, "--skip-bad-images");
    DataOptions skipping = base;
    skipping.skip_bad_images = true;
    const Dataset dataset = load_dataset(dir.path(), 0, 0, skipping);
    EXPECT_EQ(dataset.skipped_images, 3);
    ASSERT_EQ(dataset.skipped_files.size(), 3u);
    std::string skipped;
    for (const auto& line : dataset.skipped_files)
      skipped += line + "\n";
    for (const char* name : {"050-empty.png", "050-truncated.png", "050-noise.jpg"})
      EXPECT_NE(skipped.find(name), std::string::npos) << skipped;
    EXPECT_EQ(dataset.train.count, 8);
    EXPECT_EQ(dataset.test.count, 4);
    EXPECT_EQ(to_json(dataset)["skipped_images"], 3);
    // The loader never meets a bad file: a whole epoch decodes.
    EXPECT_EQ(epoch_batches(dataset, false).size(), 4u);
  }
}

TEST(ImageFolder, LayoutErrorsAreClear) {
  testing::TempDir dir;
  const DataOptions options;
  write_folder(dir.file("ok"), {{"a", 2}, {"b", 2}});

  fs::copy(dir.file("ok"), dir.file("no-test"), fs::copy_options::recursive);
  fs::remove_all(dir.file("no-test/test"));
  expect_load_error(dir.file("no-test"), options, ErrorCategory::invalid_input, "has no test/ subfolder");

  fs::copy(dir.file("ok"), dir.file("no-train"), fs::copy_options::recursive);
  fs::remove_all(dir.file("no-train/train"));
  expect_load_error(dir.file("no-train"), options, ErrorCategory::invalid_input, "has no train/ subfolder");

  fs::copy(dir.file("ok"), dir.file("empty-class"), fs::copy_options::recursive);
  fs::create_directories(dir.file("empty-class/train/c"));
  write_file_atomically(dir.file("empty-class/train/c/notes.txt"), "x");
  expect_load_error(dir.file("empty-class"), options, ErrorCategory::invalid_input,
                    "empty-class/train/c' has no .png/.jpg/.jpeg images (1 files with other extensions");

  fs::create_directories(dir.file("one-class/train/a"));
  fs::create_directories(dir.file("one-class/test/a"));
  expect_load_error(dir.file("one-class"), options, ErrorCategory::invalid_input, "at least 2");

  fs::create_directories(dir.file("nothing/train"));
  fs::create_directories(dir.file("nothing/test"));
  expect_load_error(dir.file("nothing"), options, ErrorCategory::invalid_input, "0 class folder(s)");

  fs::copy(dir.file("ok"), dir.file("unknown-test-class"), fs::copy_options::recursive);
  write_sample(dir.file("unknown-test-class/test/zebra/1.png"), 0, 0);
  expect_load_error(dir.file("unknown-test-class"), options, ErrorCategory::invalid_input,
                    "class 'zebra' is not among the 2 class folders of train/");

  fs::copy(dir.file("ok"), dir.file("sizes"), fs::copy_options::recursive);
  write_sample(dir.file("sizes/test/b/200.png"), 1, 0, 9);
  expect_load_error(dir.file("sizes"), options, ErrorCategory::invalid_input,
                    "sizes/test/b/200.png' is 9x9 (height x width) but");
  expect_load_error(dir.file("sizes"), options, ErrorCategory::invalid_input, "--resize H,W");
  DataOptions resized;
  resized.resize = ImageSize{4, 5};
  const Dataset fixed = load_dataset(dir.file("sizes"), 0, 0, resized);
  EXPECT_EQ(fixed.train.height, 4);
  EXPECT_EQ(fixed.train.width, 5);
  EXPECT_EQ(to_json(fixed)["resize"], Json({4, 5}));

  fs::copy(dir.file("ok"), dir.file("loop"), fs::copy_options::recursive);
  fs::create_directory_symlink("..", dir.file("loop/train/a/back"));
  expect_load_error(dir.file("loop"), options, ErrorCategory::invalid_input, "symlink loop");

  // Other extensions and hidden entries are ignored (counted), files beside class folders too.
  fs::copy(dir.file("ok"), dir.file("extras"), fs::copy_options::recursive);
  write_file_atomically(dir.file("extras/train/a/readme.md"), "x");
  write_file_atomically(dir.file("extras/train/a/image.bmp"), "x");
  write_file_atomically(dir.file("extras/train/a/.hidden.png"), "not read");
  fs::create_directories(dir.file("extras/train/.ipynb_checkpoints"));
  const Dataset extras = load_dataset(dir.file("extras"), 0, 0, options);
  EXPECT_EQ(extras.ignored_files, 2);
  EXPECT_EQ(extras.train.count, 4);
  EXPECT_EQ(extras.class_names.size(), 2u);
}

TEST(ImageFolder, LimitsSpreadOverClassesAndChannelsResizeApplyToIdx) {
  testing::TempDir dir;
  write_folder(dir.file("folder"), {{"a", 10}, {"b", 10}, {"c", 10}});
  const Dataset limited = load_dataset(dir.file("folder"), 6, 3, DataOptions{});
  EXPECT_EQ(limited.train.count, 6);
  EXPECT_EQ(limited.train.labels, (std::vector<std::uint8_t>{0, 0, 1, 1, 2, 2}));
  EXPECT_EQ(limited.test.labels, (std::vector<std::uint8_t>{0, 1, 2}));

  testing::write_synthetic_idx_dataset(dir.file("idx"), 20, 10, false);
  DataOptions options;
  options.channels = 3;
  options.resize = ImageSize{14, 14};
  options.mean = {0.5f, 0.5f, 0.5f};
  options.std = {0.25f, 0.25f, 0.25f};
  const Dataset idx = load_dataset(dir.file("idx"), 0, 0, options);
  EXPECT_EQ(idx.format, "idx");
  EXPECT_EQ(idx.train.channels, 3);
  EXPECT_EQ(idx.train.height, 14);
  EXPECT_EQ(idx.train.pixels.size(), 20u * 3 * 14 * 14);
  EXPECT_EQ(idx.normalization.mean, options.mean);
  EXPECT_EQ(idx.normalization.std, options.std);
  options.mean = {0.5f};
  options.std = {0.25f};
  expect_load_error(dir.file("idx"), options, ErrorCategory::usage, "one value per channel");
}

TEST(DataOptions, ParseValidateJsonAndMerge) {
  EXPECT_EQ(parse_image_size("224,160", "--resize"), (ImageSize{224, 160}));
  for (const char* bad : {"224", "224x224", "a,b", "0,5", "5,", "3,4,5", "20000,5"}) {
    try {
      parse_image_size(bad, "--resize");
      ADD_FAILURE() << bad;
    } catch (const Error& error) {
      EXPECT_EQ(error.category(), ErrorCategory::usage);
      EXPECT_NE(std::string(error.what()).find("--resize"), std::string::npos);
    }
  }
  DataOptions options;
  options.channels = 2;
  EXPECT_THROW(validate(options), Error);
  options.channels = 3;
  options.mean = {0.1f};
  EXPECT_THROW(validate(options), Error);  // --std missing
  options.std = {0.0f};
  EXPECT_THROW(validate(options), Error);  // std must be positive
  options.std = {0.2f};
  options.resize = ImageSize{8, 9};
  options.skip_bad_images = true;
  validate(options);
  const DataOptions round_trip = data_options_from_json(to_json(options));
  EXPECT_EQ(round_trip.channels, 3);
  EXPECT_EQ(round_trip.resize, (ImageSize{8, 9}));
  EXPECT_EQ(round_trip.mean, options.mean);
  EXPECT_TRUE(round_trip.skip_bad_images);
  DataOptions given;
  given.channels = 1;
  const DataOptions merged = merge_data_options(round_trip, given);
  EXPECT_EQ(merged.channels, 1);                // the flag wins
  EXPECT_EQ(merged.resize, (ImageSize{8, 9}));  // the recorded value fills the rest
  EXPECT_EQ(merged.mean, options.mean);
}

}  // namespace ipj::data
