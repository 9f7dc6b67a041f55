// Private to ipj_tune: what a tune run knows so far (its trial records, the budget spent) and what follows
// from it (the incumbent, the confirmation candidates, the winner, the reserve for confirmation and held-out
// runs), plus the JSON the tuner writes (trial records, tune.json). The loop that runs trials is tuner.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ipj/core/error.hpp"
#include "ipj/core/json_io.hpp"
#include "ipj/tune/run_cost.hpp"
#include "ipj/tune/scheduler.hpp"
#include "ipj/tune/search_space.hpp"
#include "ipj/tune/tuner.hpp"

namespace ipj::tune {

// "s" or "J".
std::string budget_unit_symbol(BudgetUnit unit);

// A logged trial record as the scheduler sees it.
TrialSummary summary_of(const Json& record, double target_acc);

struct SearchState {
  explicit SearchState(const TuneOptions& options) : options(options) {}

  const TuneOptions& options;
  std::vector<Json> search_records;
  std::vector<Json> heldout_records;
  std::vector<Json> confirm_records;
  std::vector<TrialSummary> history;  // search_records as summaries, by trial
  double spent_search = 0.0;
  double spent_heldout = 0.0;
  double spent_confirm = 0.0;
  double session_wall_s = 0.0;
  int session = 1;
  std::string stopped_because;
  int confirmations_cut = 0;
  int heldout_cut = 0;

  // Sorts a logged record into its phase's list and counts its cost (a resumed log, or a run just ended).
  void add_record(const Json& record);

  double cost(const Json& record) const { return run_cost(record, options.budget.unit); }
  double epoch_cost(const EpochPoint& epoch) const { return tune::epoch_cost(epoch, options.budget.unit); }
  double spent() const { return spent_search + spent_confirm + spent_heldout; }
  std::uint64_t confirm_seed() const { return options.seed + kConfirmSeedOffset; }

  static const Json* find_record(const std::vector<Json>& records, int trial, std::uint64_t seed);

  // The best `confirm_top` trials that reached the target on the search seed, best first.
  std::vector<const TrialSummary*> confirm_candidates() const;
  // The winner: among the candidates that also reached the target on the confirmation seed, the lowest mean
  // joules to the target over both seeds (ties: mean time); the search's best when none did or without
  // confirmation runs.
  const TrialSummary* winner() const;
  // The search seed's best trial at the target (nullptr: none reached it).
  const TrialSummary* incumbent() const;
  bool confirmed_on_second_seed(const TrialSummary* trial) const;

  // One more run of a search trial's recipe, at its full epoch length (run_cost.hpp).
  double full_run_estimate(int trial) const;
  // The largest set-up plus first epoch of the search runs so far: what a new trial costs at least before
  // the tuner can stop it (0 before the first trial).
  double first_epoch_estimate() const;
  double largest_setup() const;
  int heldout_runs_left(int trial) const;
  // The confirmation and held-out runs still to come, each estimated at its recipe's full epoch limit
  // (full_run_estimate): each candidate's own for its confirmation (the incumbent's for candidates still to
  // come), the incumbent's for the held-out runs.
  double heldout_reserve() const;
  // A new trial starts only when its first epoch (estimated from the trials so far) and the reserve fit.
  bool budget_left_for_trial() const;
  // After an epoch of a run that has cost `run_cost` so far (its largest epoch `largest_epoch`): whether
  // one more epoch like its largest, with `reserve` kept for what follows, would pass the budget.
  bool next_epoch_passes_budget(double run_cost, double largest_epoch, double reserve) const;

  std::string budget_text() const;
  std::string best_text() const;
};

// What a trial run becomes in trials.jsonl (kind "tune-trial"; `phase` search, confirm or heldout).
struct TrialRun {
  const char* phase = "search";
  int trial = 0;
  std::uint64_t seed = 0;
  const Candidate* candidate = nullptr;
  const Point* point = nullptr;
  double power_limit_w = 0.0;  // 0: not set
};
Json trial_record_json(const SearchState& state, const TrialRun& run, const TrialOutcome& outcome,
                       const StopDecision& decision);

// tune.json's object (and recipe.json's, the best recipe with its provenance, when one was found).
Json tune_report_json(const SearchState& state, const SearchSpace& space);
Json tuned_recipe_json(const Json& report);

}  // namespace ipj::tune
