// Image classification data sets: Fashion-MNIST/MNIST (IDX), CIFAR-10 (binary batches) and image folders
// (DIR/train/<class>/*.png|jpg, docs/DATA.md). Pixels stay uint8 [N, C, H, W] (4x less memory than float);
// batches are normalised as they are built.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ipj/core/json_io.hpp"
#include "ipj/data/data_options.hpp"

namespace ipj::data {

inline constexpr const char* kDefaultDataDirectory = "/usr/share/datasets/fashion-mnist";

struct ImageFileList;  // ipj/data/image_folder.hpp

struct ImageSet {
  std::vector<std::uint8_t> pixels;  // [count, channels, height, width], row-major; empty when streamed()
  std::vector<std::uint8_t> labels;  // [count], each < num_classes
  std::int64_t count = 0;
  int channels = 0;
  int height = 0;
  int width = 0;

  // Image folders: the files in sample order; without `pixels` they are decoded by the batch loader.
  std::shared_ptr<const ImageFileList> files;

  std::int64_t image_bytes() const { return static_cast<std::int64_t>(channels) * height * width; }
  // True when `pixels` is empty and samples are decoded from `files` as batches are built.
  bool streamed() const { return files != nullptr && pixels.empty(); }
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
  std::string name;    // "fashion-mnist", "mnist-format", "cifar10", or the image folder's name
  std::string format;  // "idx", "cifar10-binary" or "image-folder"
  std::string directory;
  int num_classes = 10;
  ImageSet train;
  ImageSet test;
  Normalization normalization;  // computed on the training split, or --mean/--std
  // Image folders: class names in label order (sorted folder names, as torchvision's ImageFolder).
  std::vector<std::string> class_names;
  std::int64_t skipped_images = 0;         // --skip-bad-images: images left out (corrupt, unreadable)
  std::vector<std::string> skipped_files;  // the first 20 of them, "path: reason"
  std::int64_t ignored_files = 0;          // files with other extensions inside class folders
  DataOptions options;                     // as applied: channels and resize resolved
};

// Loads a data set from `directory`, detecting the format from the files present:
// IDX: train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], t10k-images-idx3-ubyte[.gz],
//      t10k-labels-idx1-ubyte[.gz];  CIFAR-10: data_batch_1..5.bin + test_batch.bin (also under
//      cifar-10-batches-bin/). `train_limit`/`test_limit` > 0 keep only the first N samples.
// Throws ipj::Error naming the folder or file and what is wrong.
Dataset load_dataset(const std::string& directory, std::int64_t train_limit = 0, std::int64_t test_limit = 0);
// The same with --resize/--channels/--mean/--std/--skip-bad-images applied; image folders
// (DIR/train/<class>/..., DIR/test/<class>/...) are recognised too. For image folders a limit keeps N
// samples spread evenly over the sorted file list (every class represented); IDX/CIFAR keep the first N.
Dataset load_dataset(const std::string& directory, std::int64_t train_limit, std::int64_t test_limit,
                     const DataOptions& options);

// Per-channel mean and standard deviation of the pixels (scaled to [0,1]).
Normalization compute_normalization(const ImageSet& images);

// A JSON-free one-line description, e.g. "fashion-mnist (idx): 60000 train / 10000 test, 1x28x28, 10
// classes".
std::string describe(const Dataset& dataset);

// The "dataset" object of results files (docs/RESULTS.md): name, format, directory, sample counts, mean/std,
// and for image folders classes, channels, resize, storage, skipped_images, skipped_files, ignored_files.
Json to_json(const Dataset& dataset);

}  // namespace ipj::data
