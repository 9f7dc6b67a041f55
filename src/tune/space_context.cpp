// The facts a search space depends on: the model's catalog entry, this machine's CPU, and the start recipe
// (ipj compare's hand-tuned optimized recipe, so the search begins where the hand-tuning ended). A user's
// TorchScript file gets compare's recipe for files (mlp-like or cnn-like by its weights).
#include <algorithm>
#include <filesystem>

#include "ipj/device/cpu_info.hpp"
#include "ipj/device/threading.hpp"
#include "ipj/models/catalog.hpp"
#include "ipj/train/compare.hpp"
#include "ipj/tune/search_space.hpp"

namespace ipj::tune {

SpaceContext make_space_context(const models::ModelSource& model, const std::string& device,
                                bool allow_power_limit, bool jit_evaluation) {
  SpaceContext context;
  context.model = model.label();
  context.convolutional = models::is_convolutional(model);
  context.jit_evaluation = jit_evaluation;
  const auto precisions = device::native_cpu_precisions(device::probe_cpu());
  context.bf16_native = std::find(precisions.begin(), precisions.end(), "bf16") != precisions.end();
  context.cuda = device.rfind("cuda", 0) == 0;
  context.allow_power_limit = allow_power_limit;
  context.cores = device::online_cores();
  train::CompareConfig compare;
  compare.model = model;
  context.start = train::optimized_recipe(compare);
  if (model.is_file()) {
    // recipe.json names the file by its absolute path, so that `ipj train --recipe` finds it from any folder.
    std::error_code error;
    const std::filesystem::path absolute = std::filesystem::absolute(model.file, error);
    if (!error) context.start.model.file = absolute.lexically_normal().string();
  }
  context.start.device = train::parse_device(device, "--device");
  context.start.out_dir.clear();
  return context;
}

}  // namespace ipj::tune
