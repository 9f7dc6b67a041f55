// Reader for the CIFAR-10 binary format: records of 1 label byte + 3072 pixel bytes (3x32x32, channel-major).
#pragma once

#include <string>
#include <vector>

#include "ipj/data/dataset.hpp"

namespace ipj::data {

inline constexpr int kCifarImageBytes = 3 * 32 * 32;
inline constexpr int kCifarRecordBytes = 1 + kCifarImageBytes;

// Appends the records of one batch file to `into`. Throws ipj::Error naming the file for a size that is not a
// whole number of records, an empty file, or a label >= 10.
void read_cifar_batch(const std::string& path, ImageSet& into);

// Reads several batch files into one ImageSet (3x32x32).
ImageSet read_cifar_batches(const std::vector<std::string>& paths);

}  // namespace ipj::data
