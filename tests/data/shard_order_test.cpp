// DistributedSampler semantics of shard_order and the sharded BatchLoader: shards are disjoint (but for the
// padding), cover the epoch, and local batch k of all shards holds exactly global batch k.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <set>

#include "ipj/data/batch_loader.hpp"

namespace ipj::data {
namespace {

TEST(ShardOrder, InterleavesAndPadsLikeDistributedSampler) {
  const std::vector<std::int64_t> order{5, 3, 9, 1, 7};
  EXPECT_EQ(shard_order(order, 0, 2), (std::vector<std::int64_t>{5, 9, 7}));
  EXPECT_EQ(shard_order(order, 1, 2), (std::vector<std::int64_t>{3, 1, 5}));  // padded with the first sample
  EXPECT_EQ(shard_order(order, 0, 1), order);
  EXPECT_EQ(shard_order(order, 2, 3), (std::vector<std::int64_t>{9, 5}));
}

TEST(ShardOrder, LocalBatchesOfAllShardsFormTheGlobalBatch) {
  ImageSet images;
  images.count = 64;
  images.channels = 1;
  images.height = images.width = 2;
  images.pixels.resize(64 * 4);
  images.labels.resize(64);
  for (int index = 0; index < 64; ++index) {
    images.labels[static_cast<std::size_t>(index)] = static_cast<std::uint8_t>(index % 10);
    for (int pixel = 0; pixel < 4; ++pixel)
      images.pixels[static_cast<std::size_t>(index * 4 + pixel)] = static_cast<std::uint8_t>(index);
  }
  const Normalization identity = identity_normalization(1);
  LoaderOptions whole;
  whole.batch_size = 16;
  whole.seed = 11;
  whole.epoch = 2;
  whole.prefetch_batches = 0;
  BatchLoader global(images, identity, whole);
  LoaderOptions first = whole, second = whole;
  first.batch_size = second.batch_size = 8;
  first.shard_count = second.shard_count = 2;
  second.shard_index = 1;
  BatchLoader shard0(images, identity, first), shard1(images, identity, second);
  EXPECT_EQ(shard0.batch_count(), global.batch_count());
  while (auto batch = global.next()) {
    auto local0 = shard0.next(), local1 = shard1.next();
    ASSERT_TRUE(local0 && local1);
    // Sample identity = its pixel value; compare the sets of samples in the global and the two local batches.
    auto ids = [](const torch::Tensor& images_batch) {
      const torch::Tensor first_pixels =
          (images_batch.flatten(1).select(1, 0) * 255).round().to(torch::kLong);
      return std::vector<std::int64_t>(first_pixels.data_ptr<std::int64_t>(),
                                       first_pixels.data_ptr<std::int64_t>() + first_pixels.numel());
    };
    std::multiset<std::int64_t> expected, got;
    for (auto id : ids(batch->images))
      expected.insert(id);
    for (auto id : ids(local0->images))
      got.insert(id);
    for (auto id : ids(local1->images))
      got.insert(id);
    EXPECT_EQ(expected, got) << "batch " << batch->index;
  }
  EXPECT_FALSE(shard0.next().has_value());
}

}  // namespace
}  // namespace ipj::data
