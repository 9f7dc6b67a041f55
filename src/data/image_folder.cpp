// Image folders: listing (sorted, symlink loops detected), the header scan that fixes channels and size,
// parallel decoding into the uint8 cache or the streamed file list, and --skip-bad-images bookkeeping.
#include "ipj/data/image_folder.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>

#include <spdlog/spdlog.h>

#include "ipj/core/atomic_file.hpp"
#include "ipj/core/error.hpp"
#include "ipj/data/image_decoder.hpp"
#include "ipj/data/image_resize.hpp"

namespace ipj::data {
namespace fs = std::filesystem;
namespace {

constexpr int kMaxClasses = 256;  // labels are stored as uint8
constexpr std::size_t kReportedSkips = 20;
constexpr std::int64_t kMaxImagePixels = std::int64_t{1} << 28;

struct Failure {
  std::int64_t index = 0;
  std::exception_ptr error;
  std::string message;
  bool skippable = false;  // an unreadable or invalid file (not, say, out of memory)
};

int thread_count(const DataOptions& options) {
  if (options.decode_threads > 0) return options.decode_threads;
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

// Runs work(index) for index in [0, count) on up to `threads` threads; returns the failures by index.
std::vector<Failure> parallel_for_each(std::int64_t count, int threads,
                                       const std::function<void(std::int64_t)>& work) {
  std::atomic<std::int64_t> next{0};
  std::mutex mutex;
  std::vector<Failure> failures;
  auto run = [&] {
    for (std::int64_t index = next++; index < count; index = next++) {
      try {
        work(index);
      } catch (const Error& error) {
        const bool skippable =
            error.category() == ErrorCategory::invalid_input || error.category() == ErrorCategory::io;
        std::lock_guard<std::mutex> lock(mutex);
        failures.push_back({index, std::current_exception(), error.what(), skippable});
      } catch (const std::exception& error) {
        std::lock_guard<std::mutex> lock(mutex);
        failures.push_back({index, std::current_exception(), error.what(), false});
      }
    }
  };
  const auto workers = static_cast<int>(std::min<std::int64_t>(threads, std::max<std::int64_t>(count, 1)));
  std::vector<std::thread> helpers;
  for (int worker = 1; worker < workers; ++worker)
    helpers.emplace_back(run);
  run();
  for (auto& helper : helpers)
    helper.join();
  std::sort(failures.begin(), failures.end(),
            [](const Failure& a, const Failure& b) { return a.index < b.index; });
  return failures;
}

[[noreturn]] void listing_error(const fs::path& path, const std::exception& error) {
  fail(ErrorCategory::io, "cannot list '" + path.string() + "': " + error.what());
}

bool is_hidden(const std::string& name) {
  return !name.empty() && name[0] == '.';
}

// Subfolder names of `split` (symlinks followed, hidden names skipped), sorted byte-wise like Python's
// sorted() on names.
std::vector<std::string> class_folders(const fs::path& split) {
  std::vector<std::string> names;
  try {
    for (const auto& entry : fs::directory_iterator(split)) {
      const std::string name = entry.path().filename().string();
      std::error_code ignored;
      if (!is_hidden(name) && entry.is_directory(ignored)) names.push_back(name);
    }
  } catch (const fs::filesystem_error& error) {
    listing_error(split, error);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Appends (folder, file name) of every image below `folder`, recursively (torchvision's os.walk with
// followlinks=True); `ancestry` holds the canonical folders being walked, to detect symlink loops.
void collect_images(const fs::path& folder, std::vector<fs::path>& ancestry,
                    std::vector<std::pair<std::string, std::string>>& found, std::int64_t& ignored) {
  std::error_code error;
  const fs::path canonical = fs::canonical(folder, error);
  if (error) fail(ErrorCategory::io, "cannot resolve '" + folder.string() + "': " + error.message());
  if (std::find(ancestry.begin(), ancestry.end(), canonical) != ancestry.end())
    fail(ErrorCategory::invalid_input, "symlink loop: '" + folder.string() + "' leads back to '" +
                                           canonical.string() + "'; remove or replace the link");
  ancestry.push_back(canonical);
  std::vector<fs::path> subfolders;
  try {
    for (const auto& entry : fs::directory_iterator(folder)) {
      const std::string name = entry.path().filename().string();
      if (is_hidden(name)) continue;
      std::error_code status_error;
      if (entry.is_directory(status_error))
        subfolders.push_back(entry.path());
      else if (has_image_extension(name))
        found.emplace_back(folder.string(), name);  // broken links too: reading them fails by name
      else
        ++ignored;
    }
  } catch (const fs::filesystem_error& listing_failure) {
    listing_error(folder, listing_failure);
  }
  for (const auto& subfolder : subfolders)
    collect_images(subfolder, ancestry, found, ignored);
  ancestry.pop_back();
}

struct ListedSplit {
  std::vector<std::string> paths;
  std::vector<std::uint8_t> labels;
  std::vector<std::string> contents;  // file bytes kept from the header scan for the decode ("" = read again)
  std::int64_t ignored = 0;
};

ListedSplit list_split(const fs::path& split, const std::vector<std::string>& classes, bool is_train) {
  ListedSplit listed;
  for (const std::string& name : class_folders(split)) {
    const auto position = std::find(classes.begin(), classes.end(), name);
    if (position == classes.end())
      fail(ErrorCategory::invalid_input,
           "'" + (split / name).string() + "': class '" + name + "' is not among the " +
               std::to_string(classes.size()) +
               " class folders of train/; every test class needs training images");
    std::vector<std::pair<std::string, std::string>> found;
    std::vector<fs::path> ancestry;
    std::int64_t ignored = 0;
    collect_images(split / name, ancestry, found, ignored);
    if (found.empty())
      fail(ErrorCategory::invalid_input,
           "class folder '" + (split / name).string() + "' has no .png/.jpg/.jpeg images" +
               (ignored > 0 ? " (" + std::to_string(ignored) + " files with other extensions ignored)" : "") +
               "; add images or remove the folder");
    std::sort(found.begin(), found.end());
    for (const auto& [folder, file] : found) {
      listed.paths.push_back((fs::path(folder) / file).string());
      listed.labels.push_back(static_cast<std::uint8_t>(position - classes.begin()));
    }
    listed.ignored += ignored;
  }
  if (listed.paths.empty())
    fail(ErrorCategory::invalid_input, "'" + split.string() +
                                           "' has no class folders with images; expected " + split.string() +
                                           "/<class>/*.png" + (is_train ? "" : " (the test split)"));
  return listed;
}

// Keeps `limit` samples spread evenly over the list (every class represented); limit <= 0 keeps all.
void select_spread(ListedSplit& split, std::int64_t limit) {
  const auto total = static_cast<std::int64_t>(split.paths.size());
  if (limit <= 0 || limit >= total) return;
  ListedSplit kept;
  kept.ignored = split.ignored;
  for (std::int64_t index = 0; index < limit; ++index) {
    const auto source = static_cast<size_t>(index * total / limit);
    kept.paths.push_back(split.paths[source]);
    kept.labels.push_back(split.labels[source]);
  }
  split = std::move(kept);
}

// Skips (recording them) or rethrows the failures of `split`; removes the skipped samples.
void handle_failures(ListedSplit& split, std::vector<Failure> failures, bool skip, Dataset& dataset) {
  if (failures.empty()) return;
  for (const Failure& failure : failures) {
    if (!skip || !failure.skippable) {
      if (failure.skippable) {
        try {
          std::rethrow_exception(failure.error);
        } catch (const Error& error) {
          throw Error(error.category(),
                      std::string(error.what()) + " (pass --skip-bad-images to leave such images out)");
        }
      }
      std::rethrow_exception(failure.error);
    }
  }
  std::vector<bool> bad(split.paths.size(), false);
  for (const Failure& failure : failures) {
    bad[static_cast<size_t>(failure.index)] = true;
    if (dataset.skipped_files.size() < kReportedSkips) dataset.skipped_files.push_back(failure.message);
  }
  dataset.skipped_images += static_cast<std::int64_t>(failures.size());
  ListedSplit kept;
  kept.ignored = split.ignored;
  for (size_t index = 0; index < bad.size(); ++index) {
    if (bad[index]) continue;
    kept.paths.push_back(split.paths[index]);
    kept.labels.push_back(split.labels[index]);
    if (!split.contents.empty()) kept.contents.push_back(std::move(split.contents[index]));
  }
  split = std::move(kept);
}

// Reads every header (in parallel); keeps the file bytes while `byte_budget` lasts, so that the decoding
// pass does not read small files twice.
std::vector<ImageHeader> scan_headers(ListedSplit& split, const DataOptions& options,
                                      std::atomic<std::int64_t>& byte_budget, Dataset& dataset) {
  std::vector<ImageHeader> headers(split.paths.size());
  split.contents.assign(split.paths.size(), std::string());
  auto failures = parallel_for_each(
      static_cast<std::int64_t>(split.paths.size()), thread_count(options), [&](std::int64_t index) {
        const std::string& path = split.paths[static_cast<size_t>(index)];
        std::string bytes = read_file(path);
        const ImageHeader header = read_image_header(path, bytes);
        if ((byte_budget -= static_cast<std::int64_t>(bytes.size())) >= 0)
          split.contents[static_cast<size_t>(index)] = std::move(bytes);
        if (static_cast<std::int64_t>(header.height) * header.width > kMaxImagePixels)
          fail(ErrorCategory::invalid_input, "image '" + path + "' is " + std::to_string(header.height) +
                                                 "x" + std::to_string(header.width) +
                                                 " pixels, more than ipj decodes (2^28)");
        headers[static_cast<size_t>(index)] = header;
      });
  std::vector<bool> bad(headers.size(), false);
  for (const Failure& failure : failures)
    bad[static_cast<size_t>(failure.index)] = true;
  handle_failures(split, std::move(failures), options.skip_bad_images, dataset);
  std::vector<ImageHeader> kept;
  for (size_t index = 0; index < headers.size(); ++index)
    if (!bad[index]) kept.push_back(headers[index]);
  return kept;
}

// The size all samples get: --resize, else the common size of the images (error naming a mismatch).
ImageSize sample_size(
    const std::vector<std::pair<const ListedSplit*, const std::vector<ImageHeader>*>>& splits,
    const DataOptions& options) {
  if (options.resize.is_set()) return options.resize;
  const ImageHeader& first = splits[0].second->at(0);
  const std::string& first_path = splits[0].first->paths.at(0);
  for (const auto& [split, headers] : splits) {
    for (size_t index = 0; index < headers->size(); ++index) {
      const ImageHeader& header = (*headers)[index];
      if (header.height != first.height || header.width != first.width) {
        fail(ErrorCategory::invalid_input,
             "images differ in size: '" + split->paths[index] + "' is " + std::to_string(header.height) +
                 "x" + std::to_string(header.width) + " (height x width) but '" + first_path + "' is " +
                 std::to_string(first.height) + "x" + std::to_string(first.width) +
                 "; pass --resize H,W to resize every image");
      }
    }
  }
  return {first.height, first.width};
}

// Decodes one file (its `bytes` when known, else read from `path`) into `target` ([C, H, W] of the list's
// shape).
void decode_one(const ImageFileList& files, const std::string& path, const std::string& bytes,
                std::uint8_t* target) {
  const DecodedImage image =
      bytes.empty() ? decode_image_file(path, files.channels) : decode_image(path, bytes, files.channels);
  if (files.resize) {
    resize_bilinear(image.pixels.data(), image.channels, image.height, image.width, target, files.height,
                    files.width);
    return;
  }
  if (image.height != files.height || image.width != files.width)
    fail(ErrorCategory::invalid_input, "image '" + path + "' is " + std::to_string(image.height) + "x" +
                                           std::to_string(image.width) + " but the data set's images are " +
                                           std::to_string(files.height) + "x" + std::to_string(files.width) +
                                           " (changed since loading?); pass --resize H,W");
  std::copy(image.pixels.begin(), image.pixels.end(), target);
}

ImageSet to_image_set(ListedSplit& split, const ImageFileList& shape, bool cache, const DataOptions& options,
                      Dataset& dataset) {
  auto files = std::make_shared<ImageFileList>(shape);
  files->paths = split.paths;
  const std::int64_t bytes_per_image = static_cast<std::int64_t>(shape.channels) * shape.height * shape.width;
  std::vector<std::uint8_t> pixels;
  if (cache || options.skip_bad_images) {
    // Decode everything once: into the cache, or (streamed + --skip-bad-images) to find the bad ones now,
    // so that the sample list never changes during training.
    if (cache) pixels.resize(static_cast<size_t>(bytes_per_image) * split.paths.size());
    auto failures = parallel_for_each(
        static_cast<std::int64_t>(split.paths.size()), files->threads, [&](std::int64_t index) {
          const std::string& path = split.paths[static_cast<size_t>(index)];
          std::string& bytes = split.contents[static_cast<size_t>(index)];
          if (cache) {
            decode_one(*files, path, bytes, pixels.data() + index * bytes_per_image);
          } else {
            std::vector<std::uint8_t> discard(static_cast<size_t>(bytes_per_image));
            decode_one(*files, path, bytes, discard.data());
          }
          std::string().swap(bytes);  // free as we go
        });
    std::vector<bool> bad(split.paths.size(), false);
    for (const Failure& failure : failures)
      bad[static_cast<size_t>(failure.index)] = true;
    handle_failures(split, std::move(failures), options.skip_bad_images, dataset);
    if (cache && split.paths.size() != bad.size()) {  // compact the cache over the skipped images
      size_t kept = 0;
      for (size_t index = 0; index < bad.size(); ++index) {
        if (bad[index]) continue;
        std::copy_n(pixels.begin() + static_cast<std::ptrdiff_t>(index * bytes_per_image), bytes_per_image,
                    pixels.begin() + static_cast<std::ptrdiff_t>(kept * bytes_per_image));
        ++kept;
      }
      pixels.resize(kept * static_cast<size_t>(bytes_per_image));
    }
    files->paths = split.paths;
  }
  std::vector<std::string>().swap(split.contents);
  ImageSet images;
  images.count = static_cast<std::int64_t>(split.paths.size());
  images.channels = shape.channels;
  images.height = shape.height;
  images.width = shape.width;
  images.labels = split.labels;
  images.pixels = std::move(pixels);
  images.files = std::move(files);  // the paths, also for cached sets (streamed() tells them apart)
  return images;
}

}  // namespace

bool is_image_folder(const std::string& directory) {
  std::error_code error;
  return fs::is_directory(fs::path(directory) / "train", error) ||
         fs::is_directory(fs::path(directory) / "test", error);
}

Dataset load_image_folder(const std::string& directory, std::int64_t train_limit, std::int64_t test_limit,
                          const DataOptions& options) {
  const fs::path root(directory), train_folder = root / "train", test_folder = root / "test";
  for (const auto& [folder, name] : {std::pair{train_folder, "train"}, std::pair{test_folder, "test"}}) {
    std::error_code error;
    if (!fs::is_directory(folder, error))
      fail(ErrorCategory::invalid_input, "image folder '" + directory + "' has no " + name +
                                             "/ subfolder; expected " + directory +
                                             "/train/<class>/*.png and " + directory + "/test/<class>/*.png");
  }
  Dataset dataset;
  dataset.directory = directory;
  dataset.format = "image-folder";
  dataset.name = fs::path(directory).lexically_normal().filename().string();
  if (dataset.name.empty())
    dataset.name = fs::path(directory).lexically_normal().parent_path().filename().string();
  dataset.class_names = class_folders(train_folder);
  if (dataset.class_names.size() < 2)
    fail(ErrorCategory::invalid_input,
         "'" + train_folder.string() + "' has " + std::to_string(dataset.class_names.size()) +
             " class folder(s); a classifier needs at least 2 (" + train_folder.string() + "/<class>/*.png)");
  if (dataset.class_names.size() > kMaxClasses)
    fail(ErrorCategory::unsupported, "'" + train_folder.string() + "' has " +
                                         std::to_string(dataset.class_names.size()) +
                                         " class folders; ipj supports at most 256 classes");
  dataset.num_classes = static_cast<int>(dataset.class_names.size());

  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  ListedSplit train = list_split(train_folder, dataset.class_names, true);
  ListedSplit test = list_split(test_folder, dataset.class_names, false);
  dataset.ignored_files = train.ignored + test.ignored;
  if (dataset.ignored_files > 0)
    spdlog::warn("{}: {} files without a .png/.jpg/.jpeg extension ignored", directory,
                 dataset.ignored_files);
  select_spread(train, train_limit);
  select_spread(test, test_limit);
  spdlog::debug("{}: listed {} + {} images in {:.3f} s", directory, train.paths.size(), test.paths.size(),
                seconds());

  std::atomic<std::int64_t> byte_budget{options.image_cache_mb * 1024 * 1024};
  const std::vector<ImageHeader> train_headers = scan_headers(train, options, byte_budget, dataset);
  const std::vector<ImageHeader> test_headers = scan_headers(test, options, byte_budget, dataset);
  if (train.paths.empty() || test.paths.empty())
    fail(ErrorCategory::invalid_input, "'" + directory + "': every image of the " +
                                           (train.paths.empty() ? "train" : "test") +
                                           " split was skipped as unreadable");
  int channels = options.channels;
  if (channels == 0) {
    channels = 1;
    for (const auto* headers : {&train_headers, &test_headers})
      for (const auto& header : *headers)
        if (header.channels == 3) channels = 3;
  }
  spdlog::debug("{}: headers read at {:.3f} s", directory, seconds());
  const ImageSize size = sample_size({{&train, &train_headers}, {&test, &test_headers}}, options);

  ImageFileList shape;
  shape.channels = channels;
  shape.height = size.height;
  shape.width = size.width;
  shape.resize = options.resize.is_set();
  shape.threads = thread_count(options);
  const double decoded_mb = static_cast<double>(train.paths.size() + test.paths.size()) * channels *
                            size.height * size.width / (1024.0 * 1024.0);
  const bool cache = decoded_mb <= static_cast<double>(options.image_cache_mb) && options.image_cache_mb > 0;
  dataset.train = to_image_set(train, shape, cache, options, dataset);
  dataset.test = to_image_set(test, shape, cache, options, dataset);
  spdlog::debug("{}: {} at {:.3f} s", directory, cache ? "decoded into memory" : "ready to stream",
                seconds());
  dataset.options = options;
  dataset.options.channels = channels;
  if (dataset.train.count == 0 || dataset.test.count == 0)
    fail(ErrorCategory::invalid_input, "'" + directory + "': every image of the " +
                                           (dataset.train.count == 0 ? "train" : "test") +
                                           " split was skipped as unreadable");
  return dataset;
}

void decode_samples(const ImageFileList& files, const std::int64_t* indices, std::int64_t count,
                    std::uint8_t* target) {
  const std::int64_t bytes_per_image = static_cast<std::int64_t>(files.channels) * files.height * files.width;
  // Small batches are not worth a thread start (~20 us against ~20 us per small PNG).
  const int threads = count >= 4 * files.threads ? files.threads : 1;
  auto failures = parallel_for_each(count, threads, [&](std::int64_t position) {
    decode_one(files, files.paths.at(static_cast<size_t>(indices[position])), std::string(),
               target + position * bytes_per_image);
  });
  if (!failures.empty()) std::rethrow_exception(failures.front().error);
}

void convert_image_set(ImageSet& images, int channels, const ImageSize& size) {
  if (images.streamed())
    fail(ErrorCategory::internal, "convert_image_set: streamed sets are converted as they are decoded");
  if (channels == images.channels && size.height == images.height && size.width == images.width) return;
  const std::int64_t plane = static_cast<std::int64_t>(images.height) * images.width;
  const std::int64_t target_bytes = static_cast<std::int64_t>(channels) * size.height * size.width;
  std::vector<std::uint8_t> converted(static_cast<size_t>(channels * plane));
  std::vector<std::uint8_t> result(static_cast<size_t>(images.count * target_bytes));
  for (std::int64_t sample = 0; sample < images.count; ++sample) {
    convert_channels(images.pixels.data() + sample * images.image_bytes(), images.channels, channels, plane,
                     converted.data());
    resize_bilinear(converted.data(), channels, images.height, images.width,
                    result.data() + sample * target_bytes, size.height, size.width);
  }
  images.pixels = std::move(result);
  images.channels = channels;
  images.height = size.height;
  images.width = size.width;
}

}  // namespace ipj::data
