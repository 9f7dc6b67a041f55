// Helpers that several training test files share (header-only: the tests are compiled in unity batches, so
// each helper exists once).
#pragma once

#include "ipj/train/trainer.hpp"

namespace ipj::train {

// Hooks for tests: no progress bar.
inline TrainHooks quiet() {
  TrainHooks hooks;
  hooks.show_progress = false;
  return hooks;
}

}  // namespace ipj::train
