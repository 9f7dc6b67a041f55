// One trial of `ipj tune`: what the tuner asks a runner to train and what comes back, per epoch, so that the
// tuner can stop it early. The runner is an interface: real training (training_runner.hpp) or, in tests, any
// function of the recipe. LibTorch-free.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ipj/core/error.hpp"
#include "ipj/core/json_io.hpp"
#include "ipj/energy/measurement.hpp"

namespace ipj::tune {

struct TrialRequest {
  int trial = 0;            // search trial id (held-out runs carry the winner's id)
  Json recipe;              // a recipe object (train/recipe.hpp)
  std::uint64_t seed = 0;   // training seed
  double target_acc = 0.0;  // the run stops once test accuracy reaches it
};

struct EpochPoint {
  int epoch = 0;          // 1-based
  double test_acc = 0.0;  // 0..1
  double energy_j = 0.0;  // this epoch: training + evaluation
  double wall_s = 0.0;    // this epoch: training + evaluation
};

struct TrialOutcome {
  std::vector<EpochPoint> epochs;  // the epochs that ran, also when the trial failed part-way
  double energy_j = 0.0;           // the whole run (set-up + epochs)
  double wall_s = 0.0;
  energy::ReportedSource energy_source;  // none until an epoch measured (a trial that failed early)
  std::string error;  // non-empty: the trial failed (e.g. diverged); recorded, the search goes on
  // The failure's category: the exit code when failures repeat and the tuner gives up (tuner.hpp).
  ErrorCategory error_category = ErrorCategory::runtime;
};

// Called after every epoch that did not reach the target (that one ends the run anyway); returning true
// ends the trial after that epoch.
using StopCheck = std::function<bool(const EpochPoint&)>;

class TrialRunner {
 public:
  virtual ~TrialRunner() = default;
  // Trains request.recipe until the target, its last epoch, or should_stop(epoch) returns true.
  virtual TrialOutcome run(const TrialRequest& request, const StopCheck& should_stop) = 0;
};

}  // namespace ipj::tune
