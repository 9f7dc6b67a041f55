// CIFAR-10 binary batches, validated record by record.
#include "ipj/data/cifar_reader.hpp"

#include "ipj/core/atomic_file.hpp"
#include "ipj/core/error.hpp"

namespace ipj::data {

void read_cifar_batch(const std::string& path, ImageSet& into) {
  const std::string content = read_file(path);
  if (content.empty())
    fail(ErrorCategory::invalid_input, "'" + path + "' is empty: not a CIFAR-10 batch file");
  if (content.size() % kCifarRecordBytes != 0) {
    fail(ErrorCategory::invalid_input,
         "'" + path + "' is truncated or not a CIFAR-10 batch: " + std::to_string(content.size()) +
             " bytes is not a multiple of the 3073-byte record (1 label + 3x32x32 pixels)");
  }
  const size_t records = content.size() / kCifarRecordBytes;
  into.channels = 3;
  into.height = 32;
  into.width = 32;
  into.pixels.reserve(into.pixels.size() + records * kCifarImageBytes);
  for (size_t record = 0; record < records; ++record) {
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(content.data()) + record * kCifarRecordBytes;
    if (bytes[0] >= 10) {
      fail(ErrorCategory::invalid_input, "'" + path + "': record " + std::to_string(record) + " has label " +
                                             std::to_string(bytes[0]) + ", outside 0..9");
    }
    into.labels.push_back(bytes[0]);
    into.pixels.insert(into.pixels.end(), bytes + 1, bytes + kCifarRecordBytes);
  }
  into.count += static_cast<std::int64_t>(records);
}

ImageSet read_cifar_batches(const std::vector<std::string>& paths) {
  ImageSet images;
  for (const auto& path : paths)
    read_cifar_batch(path, images);
  return images;
}

}  // namespace ipj::data
