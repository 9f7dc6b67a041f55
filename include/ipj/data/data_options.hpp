// How a data set is turned into model input, shared by every command that takes --data: channel count,
// resizing, normalisation from flags, bad-image policy and the decoded-image cache of image folders.
// LibTorch-free. The CLI fills it from --resize/--channels/--mean/--std/--skip-bad-images (docs/DATA.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ipj/core/json_io.hpp"

namespace ipj::data {

struct ImageSize {
  int height = 0;
  int width = 0;
  bool is_set() const { return height > 0 && width > 0; }  // 0x0: no size given
  bool operator==(const ImageSize& other) const { return height == other.height && width == other.width; }
  bool operator!=(const ImageSize& other) const { return !(*this == other); }
};

struct DataOptions {
  // --resize H,W: every image is resized (PIL-compatible antialiased bilinear, docs/DATA.md) to H x W.
  // Required for image folders whose images differ in size. 0x0 = no resizing. (Not std::optional: GCC 12
  // reports false "may be used uninitialized" warnings for it beside vectors in value-initialised options.)
  ImageSize resize;
  // --channels: 0 = from the data (1 when every image is grayscale, else 3); 1 or 3 converts (PIL's rules).
  int channels = 0;
  // --mean/--std: per-channel normalisation in [0,1] pixel units; empty = computed on the training split.
  std::vector<float> mean;
  std::vector<float> std;
  // --skip-bad-images: corrupt or unreadable images are left out and counted instead of failing the load.
  bool skip_bad_images = false;
  // --image-cache-mb: image folders whose decoded pixels fit are decoded once, in parallel, and kept in
  // memory; larger ones (or 0) are decoded by the batch loader each epoch.
  std::int64_t image_cache_mb = 4096;
  // --decode-threads: threads that decode images (0 = one per core).
  int decode_threads = 0;
};

// Parses "H,W" (e.g. "224,224") for --resize. Throws ipj::Error(usage) naming `flag`.
ImageSize parse_image_size(const std::string& text, const std::string& flag);

// Checks value ranges (channels 0/1/3, mean/std lengths match and std > 0, sizes positive). Throws
// ipj::Error(usage) naming the flag.
void validate(const DataOptions& options);

// JSON form recorded in checkpoints and results: {"resize": [H, W] | null, "channels", "mean", "std",
// "skip_bad_images"} (cache and thread settings do not change the data and are not recorded).
Json to_json(const DataOptions& options);
// Reads it back; missing keys keep their defaults.
DataOptions data_options_from_json(const Json& json);

// `given` on top of `recorded` (e.g. the options a model was trained with): every field set in `given`
// wins, the others come from `recorded`.
DataOptions merge_data_options(const DataOptions& recorded, const DataOptions& given);

}  // namespace ipj::data
