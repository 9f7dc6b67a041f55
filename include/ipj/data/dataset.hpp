// Image classification data sets in memory: Fashion-MNIST/MNIST (IDX) and CIFAR-10 (binary batches).
// Pixels stay uint8 [N, C, H, W] (4x less memory than float); batches are normalised as they are built.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ipj::data {

inline constexpr const char* kDefaultDataDirectory = "/usr/share/datasets/fashion-mnist";

struct ImageSet {
  std::vector<std::uint8_t> pixels;  // [count, channels, height, width], row-major
  std::vector<std::uint8_t> labels;  // [count], each < num_classes
  std::int64_t count = 0;
  int channels = 0;
  int height = 0;
  int width = 0;

  std::int64_t image_bytes() const { return static_cast<std::int64_t>(channels) * height * width; }
  // Keeps the first `limit` samples (no-op when limit <= 0 or >= count).
  void truncate(std::int64_t limit);
};

struct Normalization {
  std::vector<float> mean;  // per channel, in [0,1] pixel units
  std::vector<float> std;
};

// Mean 0, std 1 per channel: batches of raw pixels in [0, 1], for models that carry their own normalisation.
inline Normalization identity_normalization(int channels) {
  return {std::vector<float>(static_cast<std::size_t>(channels), 0.0f),
          std::vector<float>(static_cast<std::size_t>(channels), 1.0f)};
}

struct Dataset {
  std::string name;    // "fashion-mnist", "mnist-format", "cifar10"
  std::string format;  // "idx" or "cifar10-binary"
  std::string directory;
  int num_classes = 10;
  ImageSet train;
  ImageSet test;
  Normalization normalization;  // computed on the training split
};

// Loads a data set from `directory`, detecting the format from the files present:
// IDX: train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], t10k-images-idx3-ubyte[.gz],
//      t10k-labels-idx1-ubyte[.gz];  CIFAR-10: data_batch_1..5.bin + test_batch.bin (also under
//      cifar-10-batches-bin/). `train_limit`/`test_limit` > 0 keep only the first N samples.
// Throws ipj::Error naming the folder or file and what is wrong.
Dataset load_dataset(const std::string& directory, std::int64_t train_limit = 0, std::int64_t test_limit = 0);

// Per-channel mean and standard deviation of the pixels (scaled to [0,1]).
Normalization compute_normalization(const ImageSet& images);

// A JSON-free one-line description, e.g. "fashion-mnist (idx): 60000 train / 10000 test, 1x28x28, 10
// classes".
std::string describe(const Dataset& dataset);

}  // namespace ipj::data
