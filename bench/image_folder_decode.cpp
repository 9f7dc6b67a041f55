// Images per second of ipj's data path on one folder: the load (listing + header scan + parallel decode into
// the uint8 cache, or listing + scan only when streamed) and one shuffled epoch of normalised batches from
// the batch loader (cached: copies; streamed: decoded per batch). Used by bench/image_folder.sh. Usage:
// ipj_bench_image_folder DATA_DIR cache|stream THREADS [EPOCHS=1]; prints one JSON object.
#include <chrono>
#include <cstdio>
#include <string>

#include "ipj/core/error.hpp"
#include "ipj/core/log.hpp"
#include "ipj/data/batch_loader.hpp"
#include "ipj/data/dataset.hpp"

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s DATA_DIR cache|stream THREADS [EPOCHS]\n", argv[0]);
    return 2;
  }
  try {
    ipj::init_logging();  // IPJ_LOG_LEVEL=debug shows the load phases
    ipj::data::DataOptions options;
    const std::string mode = argv[2];
    options.image_cache_mb = mode == "stream" ? 0 : 4096;
    options.decode_threads = std::stoi(argv[3]);
    const int epochs = argc > 4 ? std::stoi(argv[4]) : 1;
    const bool given_normalization = argc > 5 && std::string(argv[5]) == "given-normalization";
    if (given_normalization) {
      options.mean = {0.286f};
      options.std = {0.353f};
    }
    auto start = std::chrono::steady_clock::now();
    const ipj::data::Dataset dataset = ipj::data::load_dataset(argv[1], 0, 0, options);
    const double load_s = seconds_since(start);
    const std::int64_t images = dataset.train.count + dataset.test.count;

    start = std::chrono::steady_clock::now();
    double checksum = 0.0;
    for (int epoch = 0; epoch < epochs; ++epoch) {
      ipj::data::LoaderOptions loader_options;
      loader_options.batch_size = 128;
      loader_options.seed = 1;
      loader_options.epoch = static_cast<std::uint64_t>(epoch);
      loader_options.prefetch_batches = 0;  // build on this thread: the loader's own speed
      ipj::data::BatchLoader loader(dataset.train, dataset.normalization, loader_options);
      while (auto batch = loader.next())
        checksum += batch->images[0][0][0][0].item<float>();
    }
    const double epochs_s = seconds_since(start);
    std::printf(
        "{\"format\": \"%s\", \"mode\": \"%s\", \"normalization\": \"%s\", \"threads\": %d, \"images\": "
        "%lld, \"load_s\": %.4f, "
        "\"load_images_per_s\": %.0f, \"epochs\": %d, \"epoch_s\": %.4f, \"epoch_images_per_s\": %.0f, "
        "\"checksum\": %.3f}\n",
        dataset.format.c_str(), mode.c_str(), given_normalization ? "given" : "computed",
        options.decode_threads, static_cast<long long>(images), load_s, images / load_s, epochs,
        epochs_s / epochs, dataset.train.count * epochs / epochs_s, checksum);
  } catch (const ipj::Error& error) {
    std::fprintf(stderr, "error: %s\n", error.what());
    return 1;
  }
  return 0;
}
