// Trains the shared test models lazily (one per name per build, through the test cache).
#include "support/inference_fixture.hpp"

#include <map>
#include <memory>
#include <mutex>

#include "ipj/train/checkpoint.hpp"
#include "ipj/train/trainer.hpp"
#include "support/test_cache.hpp"

namespace ipj::testing {

const data::Dataset& fashion_subset() {
  static const data::Dataset dataset = data::load_dataset(data::kDefaultDataDirectory, 6000, 2000);
  return dataset;
}

// Trained once per build of this test executable (the cache key names it): CTest runs each test in its own
// process, and training here took seconds per test.
std::string trained_checkpoint(const std::string& model) {
  static std::mutex mutex;
  static TempDir folder;
  static std::map<std::string, std::string> trained;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto found = trained.find(model); found != trained.end()) return found->second;
  const std::string entry = cached_folder("trained-checkpoint\n" + model + "\n" + this_executable_signature(),
                                          [&](const std::string& out) {
                                            train::TrainConfig config;
                                            config.model = model;
                                            config.epochs = model == "mlp" ? 2 : 1;
                                            config.batch_size = 64;
                                            config.seed = 7;
                                            config.measure_energy = false;
                                            config.out_dir = out + "/" + model;
                                            train::TrainHooks hooks;
                                            hooks.show_progress = false;
                                            train::run_training(config, fashion_subset(), hooks);
                                            return true;
                                          });
  copy_folder_contents(entry, folder.path());  // a copy of its own: tests may damage their files
  return trained[model] = folder.file(model + "/" + train::kCheckpointFileName);
}

torch::Tensor test_pixels(std::int64_t count) {
  const data::Dataset& data = fashion_subset();
  // [N, 1, 28, 28] in [0, 1], the first `count` test images
  return torch::from_blob(const_cast<std::uint8_t*>(data.test.pixels.data()), {count, 1, 28, 28},
                          torch::kUInt8)
             .to(torch::kFloat) /
         255.0;
}

}  // namespace ipj::testing
