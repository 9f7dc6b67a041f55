// Batch construction (uint8 -> normalised float, augmentation; streamed image folders decoded here, on the
// producer thread and its decode helpers) and the bounded prefetch queue.
#include "ipj/data/batch_loader.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <random>

#include "ipj/core/error.hpp"
#include "ipj/data/image_folder.hpp"

namespace ipj::data {
namespace {

// SplitMix64: a well-mixed 64-bit seed from (seed, epoch, stream) so that streams never collide.
std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t epoch, std::uint64_t stream) {
  std::uint64_t value =
      seed * 0x9E3779B97F4A7C15ull + epoch * 0xBF58476D1CE4E5B9ull + stream * 0x94D049BB133111EBull;
  value ^= value >> 30;
  value *= 0xBF58476D1CE4E5B9ull;
  value ^= value >> 27;
  value *= 0x94D049BB133111EBull;
  value ^= value >> 31;
  return value;
}

constexpr std::uint64_t kShuffleStream = 1;
constexpr std::uint64_t kAugmentStream = 2;
constexpr int kCropPadding = 4;

// Where one image lands in its batch: shifted by (offset_y, offset_x) inside a zero border, then mirrored.
struct Placement {
  int offset_y = 0, offset_x = 0;
  bool flip = false;
};

// One channel plane [height, width]: target[y][x] = source[y + offset_y][x'] * scale + shift with x' = x +
// offset_x (flip: width - 1 - x + offset_x), and shift (a zero pixel) where that falls outside the source.
// Each row is one contiguous span between two fills, so the loop vectorises.
void convert_plane(const std::uint8_t* source, float* target, int height, int width, Placement placement,
                   float scale, float shift) {
  const int first_x = placement.flip ? std::max(0, placement.offset_x) : std::max(0, -placement.offset_x);
  const int end_x = placement.flip ? std::min(width, width + placement.offset_x)
                                   : std::min(width, width - placement.offset_x);
  for (int y = 0; y < height; ++y) {
    float* target_row = target + static_cast<std::int64_t>(y) * width;
    const int source_y = y + placement.offset_y;
    if (source_y < 0 || source_y >= height || first_x >= end_x) {
      std::fill(target_row, target_row + width, shift);
      continue;
    }
    const std::uint8_t* source_row = source + static_cast<std::int64_t>(source_y) * width;
    std::fill(target_row, target_row + first_x, shift);
    if (placement.flip) {
      const int mirror = width - 1 + placement.offset_x;  // x -> source x = mirror - x
      for (int x = first_x; x < end_x; ++x)
        target_row[x] = static_cast<float>(source_row[mirror - x]) * scale + shift;
    } else {
      for (int x = first_x; x < end_x; ++x)
        target_row[x] = static_cast<float>(source_row[x + placement.offset_x]) * scale + shift;
    }
    std::fill(target_row + end_x, target_row + width, shift);
  }
}

}  // namespace

std::vector<std::int64_t> epoch_order(std::int64_t count, std::uint64_t seed, std::uint64_t epoch,
                                      bool shuffle) {
  std::vector<std::int64_t> order(static_cast<size_t>(count));
  for (std::int64_t index = 0; index < count; ++index)
    order[static_cast<size_t>(index)] = index;
  if (!shuffle) return order;
  std::mt19937_64 generator(mix_seed(seed, epoch, kShuffleStream));
  // Fisher-Yates with our own index draw: std::shuffle's algorithm differs between standard libraries.
  for (std::int64_t index = count - 1; index > 0; --index) {
    const auto other = static_cast<std::int64_t>(generator() % static_cast<std::uint64_t>(index + 1));
    std::swap(order[static_cast<size_t>(index)], order[static_cast<size_t>(other)]);
  }
  return order;
}

std::vector<std::int64_t> shard_order(const std::vector<std::int64_t>& order, int shard_index,
                                      int shard_count) {
  if (shard_count < 1 || shard_index < 0 || shard_index >= shard_count)
    fail(ErrorCategory::internal,
         "shard " + std::to_string(shard_index) + " of " + std::to_string(shard_count));
  const auto count = static_cast<std::int64_t>(order.size());
  if (count == 0) return {};
  const std::int64_t padded = (count + shard_count - 1) / shard_count * shard_count;
  std::vector<std::int64_t> shard;
  shard.reserve(static_cast<std::size_t>(padded / shard_count));
  for (std::int64_t position = shard_index; position < padded; position += shard_count)
    shard.push_back(order[static_cast<std::size_t>(position % count)]);  // padding repeats the first samples
  return shard;
}

BatchLoader::BatchLoader(const ImageSet& images, const Normalization& normalization, LoaderOptions options)
    : images_(images), normalization_(normalization), options_(options) {
  if (options_.batch_size <= 0)
    fail(ErrorCategory::usage, "--batch must be positive, got " + std::to_string(options_.batch_size));
  if (static_cast<int>(normalization_.mean.size()) != images_.channels)
    fail(ErrorCategory::internal, "normalisation has " + std::to_string(normalization_.mean.size()) +
                                      " channels, images have " + std::to_string(images_.channels));
  order_ = epoch_order(images_.count, options_.seed, options_.epoch, options_.shuffle);
  if (options_.shard_count > 1) order_ = shard_order(order_, options_.shard_index, options_.shard_count);
  const auto samples = static_cast<std::int64_t>(order_.size());
  batch_count_ = options_.drop_last ? samples / options_.batch_size
                                    : (samples + options_.batch_size - 1) / options_.batch_size;
  if (options_.prefetch_batches > 0) producer_ = std::thread([this] { produce(); });
}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (producer_.joinable()) producer_.join();
}

Batch BatchLoader::build_batch(std::int64_t batch_index) const {
  const std::int64_t first = batch_index * options_.batch_size;
  const std::int64_t size = std::min(options_.batch_size, static_cast<std::int64_t>(order_.size()) - first);
  const int channels = images_.channels, height = images_.height, width = images_.width;
  const std::int64_t plane = static_cast<std::int64_t>(height) * width;

  Batch batch;
  batch.index = batch_index;
  batch.images = torch::empty({size, channels, height, width}, torch::kFloat32);  // [B, C, H, W]
  batch.labels = torch::empty({size}, torch::kInt64);                             // [B]
  float* out = batch.images.data_ptr<float>();
  std::int64_t* labels = batch.labels.data_ptr<std::int64_t>();
  // Streamed image folders: decode this batch's samples first ([size, C, H, W] uint8).
  std::vector<std::uint8_t> decoded;
  if (images_.streamed()) {
    decoded.resize(static_cast<size_t>(size * images_.image_bytes()));
    decode_samples(*images_.files, order_.data() + first, size, decoded.data());
  }

  // Augmentation draws depend on (seed, epoch, batch) only, not on thread timing.
  std::mt19937_64 generator(
      mix_seed(options_.seed, options_.epoch * 1000003ull + batch_index, kAugmentStream));
  std::vector<float> scale(channels), shift(channels);
  for (int channel = 0; channel < channels; ++channel) {
    scale[channel] = 1.0f / (255.0f * normalization_.std[channel]);
    shift[channel] = -normalization_.mean[channel] / normalization_.std[channel];
  }
  for (std::int64_t row = 0; row < size; ++row) {
    const std::int64_t sample = order_[static_cast<size_t>(first + row)];
    labels[row] = images_.labels[static_cast<size_t>(sample)];
    const std::uint8_t* source = images_.streamed() ? decoded.data() + row * images_.image_bytes()
                                                    : images_.pixels.data() + sample * images_.image_bytes();
    float* target = out + row * images_.image_bytes();
    Placement placement;
    if (options_.augment) {
      placement.offset_y = static_cast<int>(generator() % (2 * kCropPadding + 1)) - kCropPadding;
      placement.offset_x = static_cast<int>(generator() % (2 * kCropPadding + 1)) - kCropPadding;
      placement.flip = (generator() & 1u) != 0;
    }
    for (int channel = 0; channel < channels; ++channel)
      convert_plane(source + channel * plane, target + channel * plane, height, width, placement,
                    scale[channel], shift[channel]);
  }
  return batch;
}

void BatchLoader::produce() {
  try {
    for (std::int64_t batch_index = 0; batch_index < batch_count_; ++batch_index) {
      Batch batch = build_batch(batch_index);
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock,
                    [&] { return stopping_ || static_cast<int>(ready_.size()) < options_.prefetch_batches; });
      if (stopping_) return;
      ready_.push_back(std::move(batch));
      changed_.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    producer_error_ = std::current_exception();
    changed_.notify_all();
  }
}

std::optional<Batch> BatchLoader::next() {
  if (next_to_consume_ >= batch_count_) return std::nullopt;
  if (options_.prefetch_batches <= 0) return build_batch(next_to_consume_++);
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return !ready_.empty() || producer_error_ != nullptr; });
  if (ready_.empty() && producer_error_) std::rethrow_exception(producer_error_);
  Batch batch = std::move(ready_.front());
  ready_.pop_front();
  ++next_to_consume_;
  changed_.notify_all();
  return batch;
}

void for_each_pixel_batch_in_order(const ImageSet& images, std::int64_t batch_size, std::int64_t limit,
                                   const PixelBatchVisitor& visit) {
  const Normalization identity = identity_normalization(images.channels);
  LoaderOptions options;
  options.batch_size = batch_size;
  options.shuffle = false;
  options.prefetch_batches = 0;
  BatchLoader loader(images, identity, options);
  const std::int64_t wanted = limit > 0 ? std::min(limit, images.count) : images.count;
  for (std::int64_t seen = 0; seen < wanted;) {
    auto batch = loader.next();
    if (!batch) break;
    const std::int64_t take = std::min<std::int64_t>(batch->labels.size(0), wanted - seen);
    visit(batch->images.slice(0, 0, take), batch->labels.slice(0, 0, take));
    seen += take;
  }
}

}  // namespace ipj::data
