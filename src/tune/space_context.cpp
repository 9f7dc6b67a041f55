// The facts a search space depends on: the model's catalog entry, this machine's CPU, and the start recipe
// (ipj compare's hand-tuned optimized recipe, so the search begins where the hand-tuning ended).
#include <algorithm>

#include "ipj/device/cpu_info.hpp"
#include "ipj/device/threading.hpp"
#include "ipj/models/catalog.hpp"
#include "ipj/train/compare.hpp"
#include "ipj/tune/search_space.hpp"

namespace ipj::tune {

SpaceContext make_space_context(const std::string& model, const std::string& device, bool allow_power_limit,
                                bool jit_evaluation) {
  SpaceContext context;
  context.model = model;
  const auto& catalog = models::model_catalog();
  const auto entry = std::find_if(catalog.begin(), catalog.end(),
                                  [&](const models::ModelEntry& known) { return known.name == model; });
  context.convolutional = entry != catalog.end() && entry->convolutional;
  context.jit_evaluation = jit_evaluation;
  const auto precisions = device::native_cpu_precisions(device::probe_cpu());
  context.bf16_native = std::find(precisions.begin(), precisions.end(), "bf16") != precisions.end();
  context.cuda = device.rfind("cuda", 0) == 0;
  context.allow_power_limit = allow_power_limit;
  context.cores = device::online_cores();
  if (entry != catalog.end()) {
    train::CompareConfig compare;
    compare.model = model;
    context.start = train::optimized_recipe(compare);
  } else {  // a model compare has no hand-tuned recipe for: a generic fast start
    context.start.model = model;
    context.start.epochs = 4;
    context.start.batch_size = 128;
    context.start.learning_rate = 0.05;
    context.start.schedule = train::ScheduleKind::cosine;
    context.start.precision = train::Precision::automatic;
  }
  context.start.device = train::parse_device(device, "--device");
  context.start.out_dir.clear();
  return context;
}

}  // namespace ipj::tune
