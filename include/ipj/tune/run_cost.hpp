// What trial runs cost in the budget's unit (seconds or joules), read from trial records: what a run spent
// and conservative estimates of runs still to come (at full epoch length, since another seed may need every
// epoch). LibTorch-free.
#pragma once

#include <vector>

#include "ipj/core/json_io.hpp"
#include "ipj/tune/trial.hpp"

namespace ipj::tune {

enum class BudgetUnit { seconds, joules };

struct Budget {
  BudgetUnit unit = BudgetUnit::seconds;
  double limit = 300.0;  // trial wall-clock seconds, or trial joules: search, confirmation and held-out runs
};

// A trial record's "epochs" list as EpochPoints.
std::vector<EpochPoint> epochs_from_json(const Json& list);

// A whole run (the record's wall_s or energy_j), or one epoch, in `unit`.
double run_cost(const Json& record, BudgetUnit unit);
double epoch_cost(const EpochPoint& epoch, BudgetUnit unit);

struct RunCostParts {
  double setup = 0.0;          // the run's cost outside its epochs (model set-up)
  double first_epoch = 0.0;    // 0 when no epoch ran
  double largest_epoch = 0.0;  // 0 when no epoch ran
};
RunCostParts cost_parts(const Json& record, BudgetUnit unit);

// One more run of the record's recipe on another seed, estimated high: its set-up plus its largest epoch
// times its recipe's epoch limit (not the epochs it needed on this seed).
double full_run_estimate(const Json& record, BudgetUnit unit);

}  // namespace ipj::tune
