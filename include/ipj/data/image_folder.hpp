// The torchvision ImageFolder layout: DIR/train/<class>/**/*.png|jpg|jpeg and DIR/test/<class>/**/..., class
// labels in sorted folder-name order, samples sorted by (folder, file name) as torchvision lists them.
// Images are decoded in parallel once and kept as uint8 when they fit the cache budget, else decoded by
// the batch loader for every batch (ImageSet::streamed()). Rules and limits: docs/DATA.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ipj/data/data_options.hpp"
#include "ipj/data/dataset.hpp"

namespace ipj::data {

// The files of one split of a streamed image folder and the shape every decoded sample gets.
struct ImageFileList {
  std::vector<std::string> paths;  // [count], sample order
  int channels = 0;
  int height = 0;
  int width = 0;
  bool resize = false;  // decode, then resize to height x width (else the file must have that size)
  int threads = 1;      // decoding threads per call of decode_samples
};

// True when `directory` has a train/ or test/ subfolder (the image-folder layout, maybe incomplete).
bool is_image_folder(const std::string& directory);

// Loads an image folder (see above). Throws ipj::Error naming the folder or file for: missing train/ or
// test/, no class folders, fewer than 2 or more than 256 classes, a class folder without images, a test
// class unknown to train/, a symlink loop, images of different sizes without --resize, and (without
// --skip-bad-images) an unreadable or corrupt image.
Dataset load_image_folder(const std::string& directory, std::int64_t train_limit, std::int64_t test_limit,
                          const DataOptions& options);

// Decodes samples `indices[0..count)` of `files` into `target` ([count, C, H, W]) on `files.threads`
// threads. Throws the error of the first (lowest position) image that fails.
void decode_samples(const ImageFileList& files, const std::int64_t* indices, std::int64_t count,
                    std::uint8_t* target);

// Converts an in-memory set to `channels` (1 or 3) and, when `size` differs, resizes every image
// (--channels/--resize on IDX and CIFAR data).
void convert_image_set(ImageSet& images, int channels, const ImageSize& size);

}  // namespace ipj::data
