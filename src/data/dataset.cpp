// Data set discovery (IDX or CIFAR-10 by the files present), loading, validation and normalisation
// statistics.
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

ImageSet load_idx_split(const std::string& images_path, const std::string& labels_path, int num_classes) {
  const IdxArray images = read_idx_file(images_path);
  const IdxArray labels = read_idx_file(labels_path);
  if (images.dims.size() != 3) {
    fail(ErrorCategory::invalid_input, "'" + images_path +
                                           "': expected 3 dimensions (count, rows, columns), found " +
                                           std::to_string(images.dims.size()));
  }
  if (labels.dims.size() != 1) {
    fail(ErrorCategory::invalid_input,
         "'" + labels_path + "': expected 1 dimension (count), found " + std::to_string(labels.dims.size()));
  }
  if (images.dims[0] != labels.dims[0]) {
    fail(ErrorCategory::invalid_input, "'" + images_path + "' has " + std::to_string(images.dims[0]) +
                                           " images but '" + labels_path + "' has " +
                                           std::to_string(labels.dims[0]) + " labels");
  }
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
  set.pixels = images.values;
  set.labels = labels.values;
  return set;
}

std::string missing_files_message(const fs::path& directory) {
  std::string message =
      "no data set found in '" + directory.string() +
      "': expected IDX files (train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz], "
      "t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz]) or CIFAR-10 binary batches "
      "(data_batch_1.bin .. data_batch_5.bin, test_batch.bin)";
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
  Normalization result;
  const std::int64_t plane = static_cast<std::int64_t>(images.height) * images.width;
  for (int channel = 0; channel < images.channels; ++channel) {
    double sum = 0.0, sum_of_squares = 0.0;
    for (std::int64_t sample = 0; sample < images.count; ++sample) {
      const std::uint8_t* pixels = images.pixels.data() + (sample * images.channels + channel) * plane;
      for (std::int64_t offset = 0; offset < plane; ++offset) {
        const double value = pixels[offset] / 255.0;
        sum += value;
        sum_of_squares += value * value;
      }
    }
    const double n = static_cast<double>(images.count * plane);
    const double mean = n > 0 ? sum / n : 0.0;
    const double variance = n > 0 ? sum_of_squares / n - mean * mean : 1.0;
    result.mean.push_back(static_cast<float>(mean));
    result.std.push_back(static_cast<float>(std::sqrt(std::max(variance, 1e-12))));
  }
  return result;
}

Dataset load_dataset(const std::string& directory_text, std::int64_t train_limit, std::int64_t test_limit) {
  const fs::path directory(directory_text);
  if (!present(directory)) {
    std::string message = "data folder '" + directory_text + "' does not exist";
    if (directory == fs::path(kDefaultDataDirectory))
      message += "; install it with: apt-get install dataset-fashion-mnist";
    else
      message += "; pass --data DIR with an MNIST-format (IDX) or CIFAR-10 binary folder";
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
  dataset.train.truncate(train_limit);
  dataset.test.truncate(test_limit);
  dataset.normalization = compute_normalization(dataset.train);
  return dataset;
}

std::string describe(const Dataset& dataset) {
  std::ostringstream out;
  out << dataset.name << " (" << dataset.format << "): " << dataset.train.count << " train / "
      << dataset.test.count << " test, " << dataset.train.channels << "x" << dataset.train.height << "x"
      << dataset.train.width << ", " << dataset.num_classes << " classes";
  return out.str();
}

}  // namespace ipj::data
