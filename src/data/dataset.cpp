// Data set discovery (IDX, CIFAR-10 or an image folder by the files present), loading, validation,
// --channels/--resize/--mean/--std, and normalisation statistics.
#include "ipj/data/dataset.hpp"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "ipj/core/error.hpp"
#include "ipj/data/cifar_reader.hpp"
#include "ipj/data/idx_reader.hpp"
#include "ipj/data/image_folder.hpp"

namespace ipj::data {
namespace fs = std::filesystem;
namespace {

// fs::exists that reports a folder without permission or a symbolic-link loop as an I/O error naming --data
// (the throwing form would escape as an internal error).
bool present(const fs::path& path) {
  std::error_code error;
  const bool found = fs::exists(path, error);
  if (error)
    fail(ErrorCategory::io, "--data: cannot read '" + path.string() + "': " + error.message() +
                                "; check the path and its permissions");
  return found;
}

// "DIR/NAME.gz" if present, else "DIR/NAME" if present, else "".
std::string find_idx_file(const fs::path& directory, const std::string& name) {
  for (const std::string& candidate : {name + ".gz", name}) {
    const fs::path path = directory / candidate;
    if (present(path)) return path.string();
  }
  return "";
}

// The two headers agree (3 and 1 dimensions, as many images as labels): checked before any data is read, so
// that a header declaring far more images than its labels costs nothing.
void check_idx_headers(const std::string& images_path, const std::vector<std::int64_t>& images,
                       const std::string& labels_path, const std::vector<std::int64_t>& labels) {
  if (images.size() != 3) {
    fail(ErrorCategory::invalid_input, "'" + images_path +
                                           "': expected 3 dimensions (count, rows, columns), found " +
                                           std::to_string(images.size()));
  }
  if (labels.size() != 1) {
    fail(ErrorCategory::invalid_input,
         "'" + labels_path + "': expected 1 dimension (count), found " + std::to_string(labels.size()));
  }
  if (images[0] != labels[0]) {
    fail(ErrorCategory::invalid_input, "'" + images_path + "' has " + std::to_string(images[0]) +
                                           " images but '" + labels_path + "' has " +
                                           std::to_string(labels[0]) + " labels");
  }
}

ImageSet load_idx_split(const std::string& images_path, const std::string& labels_path, int num_classes) {
  check_idx_headers(images_path, read_idx_dims(images_path), labels_path, read_idx_dims(labels_path));
  IdxArray labels = read_idx_file(labels_path);
  IdxArray images = read_idx_file(images_path);
  check_idx_headers(images_path, images.dims, labels_path, labels.dims);  // the files may have changed since
  for (size_t index = 0; index < labels.values.size(); ++index) {
    if (labels.values[index] >= num_classes) {
      fail(ErrorCategory::invalid_input,
           "'" + labels_path + "': label " + std::to_string(labels.values[index]) + " at index " +
               std::to_string(index) + " is outside 0.." + std::to_string(num_classes - 1));
    }
  }
  ImageSet set;
  set.count = images.dims[0];
  set.channels = 1;
  set.height = static_cast<int>(images.dims[1]);
  set.width = static_cast<int>(images.dims[2]);
  set.pixels = std::move(images.values);
  set.labels = std::move(labels.values);
  return set;
}

std::string missing_files_message(const fs::path& directory) {
  std::string message =
      "no data set found in '" + directory.string() +
      "': expected IDX files (train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], "
      "t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz]) or CIFAR-10 binary batches "
      "(data_batch_1.bin .. data_batch_5.bin, test_batch.bin) or an image folder (train/<class>/*.png|jpg "
      "and test/<class>/*.png|jpg)";
  if (directory == fs::path(kDefaultDataDirectory))
    message += "; install it with: apt-get install dataset-fashion-mnist";
  return message;
}

}  // namespace

void ImageSet::truncate(std::int64_t limit) {
  if (limit <= 0 || limit >= count) return;
  count = limit;
  labels.resize(static_cast<size_t>(limit));
  pixels.resize(static_cast<size_t>(limit * image_bytes()));
}

Normalization compute_normalization(const ImageSet& images) {
  const std::int64_t plane = static_cast<std::int64_t>(images.height) * images.width;
  std::vector<double> sums(static_cast<size_t>(images.channels), 0.0);
  std::vector<double> sums_of_squares(sums.size(), 0.0);
  // Sums per channel over samples in order (streamed sets in chunks: the same additions in the same order).
  auto accumulate = [&](const std::uint8_t* samples, std::int64_t count) {
    for (int channel = 0; channel < images.channels; ++channel) {
      double sum = sums[static_cast<size_t>(channel)],
             sum_of_squares = sums_of_squares[static_cast<size_t>(channel)];
      for (std::int64_t sample = 0; sample < count; ++sample) {
        const std::uint8_t* pixels = samples + (sample * images.channels + channel) * plane;
        for (std::int64_t offset = 0; offset < plane; ++offset) {
          const double value = pixels[offset] / 255.0;
          sum += value;
          sum_of_squares += value * value;
        }
      }
      sums[static_cast<size_t>(channel)] = sum;
      sums_of_squares[static_cast<size_t>(channel)] = sum_of_squares;
    }
  };
  if (images.streamed()) {
    constexpr std::int64_t kChunk = 512;
    std::vector<std::uint8_t> chunk(static_cast<size_t>(kChunk * images.image_bytes()));
    std::vector<std::int64_t> indices(static_cast<size_t>(kChunk));
    for (std::int64_t first = 0; first < images.count; first += kChunk) {
      const std::int64_t count = std::min(kChunk, images.count - first);
      for (std::int64_t index = 0; index < count; ++index)
        indices[static_cast<size_t>(index)] = first + index;
      decode_samples(*images.files, indices.data(), count, chunk.data());
      accumulate(chunk.data(), count);
    }
  } else {
    accumulate(images.pixels.data(), images.count);
  }
  Normalization result;
  for (int channel = 0; channel < images.channels; ++channel) {
    const double n = static_cast<double>(images.count * plane);
    const double mean = n > 0 ? sums[static_cast<size_t>(channel)] / n : 0.0;
    const double variance = n > 0 ? sums_of_squares[static_cast<size_t>(channel)] / n - mean * mean : 1.0;
    result.mean.push_back(static_cast<float>(mean));
    result.std.push_back(static_cast<float>(std::sqrt(std::max(variance, 1e-12))));
  }
  return result;
}

Dataset load_dataset(const std::string& directory_text, std::int64_t train_limit, std::int64_t test_limit) {
  return load_dataset(directory_text, train_limit, test_limit, DataOptions{});
}

Dataset load_dataset(const std::string& directory_text, std::int64_t train_limit, std::int64_t test_limit,
                     const DataOptions& options) {
  validate(options);
  const fs::path directory(directory_text);
  if (!present(directory)) {
    std::string message = "data folder '" + directory_text + "' does not exist";
    if (directory == fs::path(kDefaultDataDirectory))
      message += "; install it with: apt-get install dataset-fashion-mnist";
    else
      message += "; pass --data DIR with an MNIST-format (IDX), CIFAR-10 binary or image folder";
    fail(ErrorCategory::io, message);
  }
  std::error_code error;
  if (!fs::is_directory(directory, error))
    fail(ErrorCategory::usage,
         "--data '" + directory_text + "' is a file; pass the folder that holds the data set");
  if (::access(directory.c_str(), R_OK | X_OK) != 0)
    fail(ErrorCategory::io, "--data '" + directory_text + "' is not readable: " + std::strerror(errno) +
                                "; check its permissions");

  Dataset dataset;
  dataset.directory = directory_text;
  const std::string train_images = find_idx_file(directory, "train-images-idx3-ubyte");
  if (!train_images.empty()) {
    const std::string train_labels = find_idx_file(directory, "train-labels-idx1-ubyte");
    const std::string test_images = find_idx_file(directory, "t10k-images-idx3-ubyte");
    const std::string test_labels = find_idx_file(directory, "t10k-labels-idx1-ubyte");
    for (const auto& [path, name] : {std::pair{train_labels, "train-labels-idx1-ubyte"},
                                     std::pair{test_images, "t10k-images-idx3-ubyte"},
                                     std::pair{test_labels, "t10k-labels-idx1-ubyte"}}) {
      if (path.empty())
        fail(ErrorCategory::invalid_input,
             "'" + directory_text + "' has train images but no " + name + "[.gz]");
    }
    dataset.format = "idx";
    dataset.name =
        directory.filename().string().find("fashion") != std::string::npos ? "fashion-mnist" : "mnist-format";
    dataset.train = load_idx_split(train_images, train_labels, dataset.num_classes);
    dataset.test = load_idx_split(test_images, test_labels, dataset.num_classes);
    if (dataset.train.height != dataset.test.height || dataset.train.width != dataset.test.width) {
      fail(ErrorCategory::invalid_input,
           "'" + directory_text + "': train images are " + std::to_string(dataset.train.height) + "x" +
               std::to_string(dataset.train.width) + " but test images are " +
               std::to_string(dataset.test.height) + "x" + std::to_string(dataset.test.width));
    }
  } else if (is_image_folder(directory_text)) {
    dataset = load_image_folder(directory_text, train_limit, test_limit, options);
  } else {
    fs::path cifar = directory;
    if (!present(cifar / "data_batch_1.bin") && present(directory / "cifar-10-batches-bin"))
      cifar = directory / "cifar-10-batches-bin";
    if (!present(cifar / "data_batch_1.bin"))
      fail(ErrorCategory::invalid_input, missing_files_message(directory));
    std::vector<std::string> train_batches;
    for (int index = 1; index <= 5; ++index) {
      const fs::path path = cifar / ("data_batch_" + std::to_string(index) + ".bin");
      if (present(path)) train_batches.push_back(path.string());
    }
    if (!present(cifar / "test_batch.bin"))
      fail(ErrorCategory::invalid_input,
           "'" + cifar.string() + "' has CIFAR-10 training batches but no test_batch.bin");
    dataset.format = "cifar10-binary";
    dataset.name = "cifar10";
    dataset.train = read_cifar_batches(train_batches);
    dataset.test = read_cifar_batches({(cifar / "test_batch.bin").string()});
  }
  if (dataset.format != "image-folder") {
    dataset.train.truncate(train_limit);
    dataset.test.truncate(test_limit);
    const int channels = options.channels != 0 ? options.channels : dataset.train.channels;
    const ImageSize size =
        options.resize.is_set() ? options.resize : ImageSize{dataset.train.height, dataset.train.width};
    convert_image_set(dataset.train, channels, size);
    convert_image_set(dataset.test, channels, size);
    dataset.options = options;
    dataset.options.channels = channels;
  }
  if (!options.mean.empty()) {
    if (static_cast<int>(options.mean.size()) != dataset.train.channels)
      fail(ErrorCategory::usage, "--mean/--std have " + std::to_string(options.mean.size()) +
                                     " values but the images have " + std::to_string(dataset.train.channels) +
                                     " channel(s); give one value per channel");
    dataset.normalization = {options.mean, options.std};
  } else {
    dataset.normalization = compute_normalization(dataset.train);
  }
  return dataset;
}

std::string describe(const Dataset& dataset) {
  std::ostringstream out;
  out << dataset.name << " (" << dataset.format << "): " << dataset.train.count << " train / "
      << dataset.test.count << " test, " << dataset.train.channels << "x" << dataset.train.height << "x"
      << dataset.train.width << ", " << dataset.num_classes << " classes";
  if (dataset.format == "image-folder")
    out << (dataset.train.streamed() ? ", decoded per batch" : ", decoded once into memory");
  if (dataset.skipped_images > 0) out << ", " << dataset.skipped_images << " bad images skipped";
  return out.str();
}

Json to_json(const Dataset& dataset) {
  Json json = {{"name", dataset.name},
               {"format", dataset.format},
               {"directory", dataset.directory},
               {"train_samples", dataset.train.count},
               {"test_samples", dataset.test.count},
               {"mean", dataset.normalization.mean},
               {"std", dataset.normalization.std}};
  if (dataset.format == "image-folder") {
    json["classes"] = dataset.class_names;
    json["input_shape"] = {dataset.train.channels, dataset.train.height, dataset.train.width};
    json["resize"] = dataset.options.resize.is_set()
                         ? Json::array({dataset.options.resize.height, dataset.options.resize.width})
                         : Json(nullptr);
    json["storage"] = dataset.train.streamed() ? "streamed" : "memory";
    json["skipped_images"] = dataset.skipped_images;
    json["skipped_files"] = dataset.skipped_files;
    json["ignored_files"] = dataset.ignored_files;
  }
  return json;
}

}  // namespace ipj::data
