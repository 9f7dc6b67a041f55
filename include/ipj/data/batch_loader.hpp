// Mini-batch loader: deterministic shuffling from (seed, epoch), optional random-crop/flip augmentation, and
// a background thread that builds the next batches while the model trains (the seeds' `num_workers`). One
// producer thread per loader; batches come out in a fixed order, so runs are reproducible.
#pragma once

#include <torch/types.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "ipj/data/dataset.hpp"

namespace ipj::data {

struct LoaderOptions {
  std::int64_t batch_size = 128;
  bool shuffle = true;
  std::uint64_t seed = 0;
  std::uint64_t epoch = 0;
  bool augment = false;      // random crop (zero padding 4 px) + horizontal flip
  int prefetch_batches = 4;  // batches built ahead; 0 = build on the calling thread (no background thread)
  bool drop_last = false;
  // Data-parallel training: this process reads shard `shard_index` of `shard_count` of the epoch's order
  // (see shard_order); 1 = the whole set.
  int shard_index = 0;
  int shard_count = 1;
};

struct Batch {
  torch::Tensor images;  // [B, C, H, W] float32, normalised
  torch::Tensor labels;  // [B] int64
  std::int64_t index = 0;
};

// The sample order of one epoch: a permutation of [0, count) determined by (seed, epoch) alone.
std::vector<std::int64_t> epoch_order(std::int64_t count, std::uint64_t seed, std::uint64_t epoch,
                                      bool shuffle);

// PyTorch's DistributedSampler (drop_last=False): the order is padded with its first samples to a multiple of
// `shard_count`, and shard i takes positions i, i + shard_count, ... So with a global batch B split into
// shard_count local batches of B / shard_count, local batch k of every shard together hold exactly global
// batch k of the unsharded order.
std::vector<std::int64_t> shard_order(const std::vector<std::int64_t>& order, int shard_index,
                                      int shard_count);

class BatchLoader {
 public:
  // `images` and `normalization` must outlive the loader.
  BatchLoader(const ImageSet& images, const Normalization& normalization, LoaderOptions options);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // The next batch, or nullopt at the end of the epoch. Rethrows an error raised while building a batch.
  std::optional<Batch> next();
  std::int64_t batch_count() const { return batch_count_; }
  // Samples the epoch's batches hold (all of them, or whole batches only with drop_last).
  std::int64_t sample_count() const {
    return options_.drop_last ? batch_count_ * options_.batch_size : static_cast<std::int64_t>(order_.size());
  }

 private:
  Batch build_batch(std::int64_t batch_index) const;
  void produce();

  const ImageSet& images_;
  const Normalization& normalization_;
  LoaderOptions options_;
  std::vector<std::int64_t> order_;
  std::int64_t batch_count_ = 0;
  std::int64_t next_to_consume_ = 0;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Batch> ready_;
  bool stopping_ = false;
  std::exception_ptr producer_error_;
  std::thread producer_;
};

// Visits the first `limit` samples (0 = all) in order, on the calling thread, as raw pixels [B, C, H, W] in
// [0, 1] with their labels [B]; the last batch is cut at the limit. For evaluation and calibration of models
// that carry their own normalisation.
using PixelBatchVisitor = std::function<void(const torch::Tensor& pixels, const torch::Tensor& labels)>;
void for_each_pixel_batch_in_order(const ImageSet& images, std::int64_t batch_size, std::int64_t limit,
                                   const PixelBatchVisitor& visit);

}  // namespace ipj::data
