// Batch loader: deterministic order from (seed, epoch), every sample once per epoch, correct normalisation,
// prefetching gives the same batches as synchronous loading, augmentation is seeded.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <set>
#include <tuple>

#include "ipj/data/batch_loader.hpp"
#include "support/test_support.hpp"

namespace ipj::data {
namespace {

ImageSet tiny_images(std::int64_t count) {
  ImageSet images;
  images.count = count;
  images.channels = 1;
  images.height = 2;
  images.width = 2;
  for (std::int64_t sample = 0; sample < count; ++sample) {
    images.labels.push_back(static_cast<std::uint8_t>(sample % 10));
    for (int pixel = 0; pixel < 4; ++pixel)
      images.pixels.push_back(static_cast<std::uint8_t>(sample));
  }
  return images;
}

std::vector<torch::Tensor> all_batches(const ImageSet& images, const Normalization& normalization,
                                       LoaderOptions options) {
  BatchLoader loader(images, normalization, options);
  std::vector<torch::Tensor> batches;
  while (auto batch = loader.next())
    batches.push_back(batch->images.clone());
  return batches;
}

}  // namespace

TEST(EpochOrder, PermutationDeterministicAndEpochDependent) {
  const auto first = epoch_order(1000, 7, 0, true);
  EXPECT_EQ(first, epoch_order(1000, 7, 0, true));
  EXPECT_NE(first, epoch_order(1000, 7, 1, true));
  EXPECT_NE(first, epoch_order(1000, 8, 0, true));
  auto sorted = first;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, epoch_order(1000, 7, 0, false));
}

TEST(BatchLoader, CoversEverySampleOnceWithPartialLastBatch) {
  const ImageSet images = tiny_images(23);
  const Normalization identity{{0.0f}, {1.0f}};
  LoaderOptions options;
  options.batch_size = 5;
  options.seed = 3;
  BatchLoader loader(images, identity, options);
  EXPECT_EQ(loader.batch_count(), 5);
  std::vector<int> seen;
  std::vector<std::int64_t> sizes;
  while (auto batch = loader.next()) {
    sizes.push_back(batch->images.size(0));
    for (std::int64_t row = 0; row < batch->images.size(0); ++row) {
      const int sample = static_cast<int>(std::lround(batch->images[row][0][0][0].item<float>() * 255.0f));
      EXPECT_EQ(batch->labels[row].item<std::int64_t>(), sample % 10);
      seen.push_back(sample);
    }
  }
  EXPECT_EQ(sizes, (std::vector<std::int64_t>{5, 5, 5, 5, 3}));
  std::sort(seen.begin(), seen.end());
  for (int sample = 0; sample < 23; ++sample)
    EXPECT_EQ(seen[sample], sample);
}

TEST(BatchLoader, NormalisesWithMeanAndStd) {
  const ImageSet images = tiny_images(3);
  const Normalization normalization{{0.5f}, {0.25f}};
  LoaderOptions options;
  options.batch_size = 3;
  options.shuffle = false;
  BatchLoader loader(images, normalization, options);
  const auto batch = loader.next();
  ASSERT_TRUE(batch);
  EXPECT_FLOAT_EQ(batch->images[2][0][1][1].item<float>(), (2.0f / 255.0f - 0.5f) / 0.25f);
  EXPECT_FALSE(loader.next());
}

TEST(BatchLoader, PrefetchMatchesSynchronousAndAugmentationIsSeeded) {
  testing::TempDir dir;
  testing::write_synthetic_idx_dataset(dir.path(), 64, 10, false);
  const Dataset dataset = load_dataset(dir.path());
  LoaderOptions options;
  options.batch_size = 16;
  options.seed = 11;
  options.augment = true;
  options.prefetch_batches = 0;
  const auto synchronous = all_batches(dataset.train, dataset.normalization, options);
  options.prefetch_batches = 3;
  const auto prefetched = all_batches(dataset.train, dataset.normalization, options);
  ASSERT_EQ(synchronous.size(), prefetched.size());
  for (size_t index = 0; index < synchronous.size(); ++index)
    EXPECT_TRUE(torch::equal(synchronous[index], prefetched[index]));
  options.augment = false;
  const auto plain = all_batches(dataset.train, dataset.normalization, options);
  EXPECT_FALSE(torch::equal(plain[0], synchronous[0]));  // augmentation changed pixels
}

// Every augmented image is one of the 9 x 9 x 2 placements of its source (shifted by -4..4 in y and x inside
// a zero border, then mirrored or not), computed here with torch's pad, narrow and flip; the same placement
// for every channel; and over the batch several placements occur (so plain copies would fail).
TEST(BatchLoader, AugmentedImagesAreShiftedMirroredCropsOfTheirSource) {
  ImageSet images;
  images.count = 48;
  images.channels = 3;
  images.height = 7;
  images.width = 6;
  for (std::int64_t sample = 0; sample < images.count; ++sample) {
    images.labels.push_back(static_cast<std::uint8_t>(sample));  // the label names the source image
    for (int pixel = 0; pixel < 3 * 7 * 6; ++pixel)
      images.pixels.push_back(static_cast<std::uint8_t>(1 + (sample * 7 + pixel * 3) % 250));  // never 0
  }
  const Normalization normalization{{0.25f, 0.5f, 0.75f}, {0.5f, 0.25f, 2.0f}};
  LoaderOptions options;
  options.batch_size = images.count;
  options.seed = 5;
  options.augment = true;
  BatchLoader loader(images, normalization, options);
  const auto batch = loader.next();
  ASSERT_TRUE(batch);
  const auto all_pixels = torch::tensor(std::vector<std::int64_t>(images.pixels.begin(), images.pixels.end()))
                              .to(torch::kFloat32)
                              .view({images.count, 3, 7, 6});             // [N, C, H, W]
  const auto mean = torch::tensor(normalization.mean).view({3, 1, 1});    // [C, 1, 1]
  const auto std_dev = torch::tensor(normalization.std).view({3, 1, 1});  // [C, 1, 1]
  std::set<std::tuple<int, int, bool>> placements_seen;
  for (std::int64_t row = 0; row < images.count; ++row) {
    const std::int64_t sample = batch->labels[row].item<std::int64_t>();
    const auto padded = torch::constant_pad_nd(all_pixels[sample], {4, 4, 4, 4}, 0);  // [C, H + 8, W + 8]
    int matches = 0;
    for (int offset_y = -4; offset_y <= 4; ++offset_y)
      for (int offset_x = -4; offset_x <= 4; ++offset_x)
        for (const bool flip : {false, true}) {
          auto crop = padded.narrow(1, 4 + offset_y, 7).narrow(2, 4 + offset_x, 6);  // [C, H, W]
          if (flip) crop = crop.flip({2});
          const auto expected = (crop / 255.0f - mean) / std_dev;
          if (!torch::allclose(batch->images[row], expected, 1e-5, 1e-5)) continue;
          ++matches;
          placements_seen.insert({offset_y, offset_x, flip});
        }
    EXPECT_GE(matches, 1) << "image " << row << " (source " << sample << ") is no placement of its source";
  }
  EXPECT_GE(placements_seen.size(), 10u);
}

TEST(BatchLoader, AbandoningAnEpochEarlyStopsTheProducer) {
  const ImageSet images = tiny_images(1000);
  const Normalization identity{{0.0f}, {1.0f}};
  LoaderOptions options;
  options.batch_size = 10;
  options.prefetch_batches = 2;
  BatchLoader loader(images, identity, options);
  ASSERT_TRUE(loader.next());
  // Destructor must join the producer without hanging while the queue is full.
}

}  // namespace ipj::data
