// `ipj tune`: the search loop. Proposes recipes, trains them through a TrialRunner, stops the hopeless ones
// early, logs every trial to DIR/trials.jsonl as it ends (so --resume continues after a crash), re-runs the
// winner on held-out seeds and writes DIR/recipe.json and DIR/tune.json (docs/TUNE.md). LibTorch-free.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ipj/core/json_io.hpp"
#include "ipj/tune/run_cost.hpp"
#include "ipj/tune/search_space.hpp"
#include "ipj/tune/trial.hpp"

namespace ipj::tune {

struct TuneOptions {
  std::string out_dir;  // trials.jsonl, tune_settings.json, recipe.json, tune.json
  double target_acc = 0.0;
  std::uint64_t seed = 0;  // the search's generator and the trials' training seed
  Budget budget;
  int max_trials = 0;    // 0 = until the budget or the space runs out
  int heldout_runs = 3;  // the winner is re-run on seeds seed+1 .. seed+heldout_runs
  // The best confirm_top trials are re-run on a second selection seed (seed + kConfirmSeedOffset); the winner
  // is the one with the fewest mean joules to the target over both seeds (0 = choose on the search seed
  // alone).
  int confirm_top = 3;
  bool resume = false;  // continue DIR/trials.jsonl (without it, a folder holding a run is refused)
  bool show_progress = true;
  Json settings;  // what defines the run (model, data, space, ...): saved as DIR/tune_settings.json
  // Sets the GPU power limit to a fraction of its default and returns the watts set; empty when the space
  // has no power_limit dimension (the limit is then never touched).
  std::function<double(double fraction)> apply_power_limit;
};

inline constexpr std::uint64_t kConfirmSeedOffset = 100;
inline constexpr const char* kTrialLogName = "trials.jsonl";
inline constexpr const char* kSettingsName = "tune_settings.json";
inline constexpr const char* kRecipeName = "recipe.json";
inline constexpr const char* kReportName = "tune.json";

// Refuses a folder that holds a tune run unless `resume`, and `resume` without one (ipj::Error(usage)).
void check_out_folder(const std::string& out_dir, bool resume);

// Runs (or continues) the search and the held-out runs; returns the report (what tune.json holds):
// {"schema_version", "kind": "tune", "trials", "pareto", "best", "confirmations", "heldout_seeds",
// "heldout_summary", "budget", "search", "space", "settings", "files"}. Throws ipj::Error(usage) for a folder
// that holds a run without `resume` (or none with it), io when files cannot be written, and the last
// failure's category when the first 3 trials, or 6 in a row later, failed (the log keeps them for --resume).
// The budget covers everything: the confirmation and held-out runs are reserved at full epoch length and cut
// when they would not fit.
Json run_tune(const TuneOptions& options, const SearchSpace& space, TrialRunner& runner);

// {"mean", "stddev" (sample; 0 for one value), "median", "min", "max", "count"} of the numbers; null when
// there are none.
Json spread_of(std::vector<double> values);

// The trials (trial records) not dominated in (higher test accuracy, fewer joules, less time), by joules.
std::vector<Json> pareto_front(const std::vector<Json>& records);

// The report as text for the terminal: the trials table, the Pareto front, the best recipe, held-out runs,
// the budget and the files.
std::string render_tune_report(const Json& report);

}  // namespace ipj::tune
