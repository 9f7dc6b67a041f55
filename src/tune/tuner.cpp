// The search loop: folder checks and resume, proposals, early stopping per epoch, repeated failures, the
// confirmation and held-out runs. What it knows lives in a SearchState (search_state.cpp); the JSON it writes
// is built in tune_result.cpp.
#include "ipj/tune/tuner.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "ipj/core/atomic_file.hpp"
#include "ipj/core/error.hpp"
#include "ipj/core/log.hpp"
#include "ipj/core/number_format.hpp"
#include "ipj/tune/scheduler.hpp"
#include "ipj/tune/trial_log.hpp"
#include "search_state.hpp"

namespace ipj::tune {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kFailuresWhileNoneSucceeded = 3;
constexpr size_t kConsecutiveFailures = 6;
namespace fs = std::filesystem;

class Search {
 public:
  Search(const TuneOptions& options, const SearchSpace& space, TrialRunner& runner)
      : options_(options), space_(space), runner_(runner), proposer_(space, options.seed), state_(options) {}

  Json run() {
    const auto session_start = Clock::now();
    open_folder();
    while (true) {
      if (options_.max_trials > 0 && static_cast<int>(state_.history.size()) >= options_.max_trials) {
        state_.stopped_because = "max_trials";
        break;
      }
      if (!state_.budget_left_for_trial()) {
        state_.stopped_because = "budget";
        break;
      }
      const int index = static_cast<int>(state_.history.size());
      const std::optional<Point> point = proposer_.propose(index, state_.history);
      if (!point) {
        state_.stopped_because = "space exhausted";
        break;
      }
      run_search_trial(index, *point);
      give_up_after_repeated_failures();
    }
    run_confirmations();
    run_heldout();
    state_.session_wall_s = std::chrono::duration<double>(Clock::now() - session_start).count();
    return finish();
  }

 private:
  void say(const std::string& line) const {
    if (options_.show_progress) std::fprintf(stderr, "[tune] %s\n", line.c_str());
  }

  static std::string format(const char* pattern, double value) { return format_number(pattern, value); }

  std::string path(const char* name) const { return (fs::path(options_.out_dir) / name).string(); }

  void open_folder() {
    if (options_.target_acc <= 0.0 || options_.target_acc > 1.0)
      fail(ErrorCategory::usage, "--target-acc must be a fraction in (0, 1]");
    if (!(options_.budget.limit > 0.0) || !std::isfinite(options_.budget.limit))
      fail(ErrorCategory::usage, "the budget (--budget-s / --budget-j) must be a positive number");
    check_out_folder(options_.out_dir, options_.resume);
    write_json_file(path(kSettingsName), options_.settings);
    const TrialLogContents log = read_trial_log(path(kTrialLogName));
    if (log.torn_tail) {
      spdlog::warn(
          "ignoring the torn last line of {} (a crash while it was written): \"{}...\"; that trial runs "
          "again",
          path(kTrialLogName), log.torn_text);
      rewrite_trial_log(path(kTrialLogName), log.records);
    }
    int last_session = 0;
    for (const auto& record : log.records) {
      last_session = std::max(last_session, record.value("session", 0));
      state_.add_record(record);
    }
    state_.session = last_session + 1;
    if (!log.records.empty())
      say("resuming: " + std::to_string(state_.search_records.size()) + " finished trial(s) and " +
          std::to_string(state_.confirm_records.size() + state_.heldout_records.size()) +
          " confirmation/held-out run(s) from " + path(kTrialLogName) + " are kept, none re-run");
  }

  // The per-epoch decision for a search trial: budget, then the incumbent bound, then successive halving.
  StopDecision judge(const TrialSummary& current, double trial_cost, double largest_epoch) const {
    const EpochPoint& last = current.epochs.back();
    if (last.test_acc >= options_.target_acc) return {};  // the trainer stops there by itself
    if (state_.next_epoch_passes_budget(trial_cost, largest_epoch, state_.heldout_reserve()))
      return {true, "budget",
              "another epoch would pass the budget (confirmation and held-out runs reserved)"};
    if (const TrialSummary* best = state_.incumbent()) {
      double joules = 0.0;
      for (const auto& epoch : current.epochs)
        joules += epoch.energy_j;
      if (joules >= best->energy_to_target_j)
        return {true, "bound",
                "already spent " + format("%.1f", joules) + " J without reaching the target; trial " +
                    std::to_string(best->trial) + " reached it with " +
                    format("%.1f", best->energy_to_target_j) + " J"};
    }
    return successive_halving(state_.history, current, space_.settings);
  }

  Candidate candidate_for(const Point& point) const {
    Candidate candidate = candidate_at(space_, point);
    candidate.recipe["target_acc"] = options_.target_acc;
    return candidate;
  }

  double set_power_limit(const Candidate& candidate) const {
    if (candidate.power_limit_fraction <= 0.0 || !options_.apply_power_limit) return 0.0;
    return options_.apply_power_limit(candidate.power_limit_fraction);
  }

  // Logs a finished run: trials.jsonl first (crash-safe), then the state.
  Json log_run(const TrialRun& run, const TrialOutcome& outcome, const StopDecision& decision) {
    const Json record = trial_record_json(state_, run, outcome, decision);
    append_trial_record(path(kTrialLogName), record);
    state_.add_record(record);
    return record;
  }

  void run_search_trial(int index, const Point& point) {
    const Candidate candidate = candidate_for(point);
    say("trial " + std::to_string(index) + " (" + state_.best_text() + ", " + state_.budget_text() +
        "): " + describe(candidate));
    const double power_limit_w = set_power_limit(candidate);
    TrialSummary current;
    current.trial = index;
    current.point = point;
    double trial_cost = 0.0, largest_epoch = 0.0;
    StopDecision decision;
    const StopCheck should_stop = [&](const EpochPoint& epoch) {
      current.epochs.push_back(epoch);
      trial_cost += state_.epoch_cost(epoch);
      largest_epoch = std::max(largest_epoch, state_.epoch_cost(epoch));
      say("  epoch " + std::to_string(epoch.epoch) + ": test acc " + format("%.4f", epoch.test_acc) + "  " +
          format("%.1f", epoch.energy_j) + " J  " + format("%.2f", epoch.wall_s) + " s");
      // After its last epoch a run ends anyway: it missed, nothing stopped it.
      const bool last_epoch = epoch.epoch >= candidate.recipe.value("epochs", 0);
      decision = last_epoch ? StopDecision{} : judge(current, trial_cost, largest_epoch);
      return decision.stop;
    };
    const TrialOutcome outcome =
        runner_.run({index, candidate.recipe, options_.seed, options_.target_acc}, should_stop);
    if (!outcome.error.empty()) last_failure_category_ = outcome.error_category;
    const Json record =
        log_run({"search", index, options_.seed, &candidate, &point, power_limit_w}, outcome, decision);
    const std::string status = record["status"];
    std::string result = "  -> " + status;
    if (status == "reached")
      result += " " + format("%.3f", options_.target_acc) + " at epoch " + record["target_epoch"].dump() +
                ": " + format("%.1f", record["energy_to_target_j"].get<double>()) + " J, " +
                format("%.2f", record["time_to_target_s"].get<double>()) + " s";
    else if (!record["reason"].get<std::string>().empty())
      result += ": " + record["reason"].get<std::string>();
    say(result);
  }

  // The same error in trial after trial is the set-up's (data, device, build), not the recipes': the search
  // stops with the last error's category instead of spending the budget on it. Limits: the first
  // kFailuresWhileNoneSucceeded trials (all so far), or kConsecutiveFailures in a row later.
  void give_up_after_repeated_failures() const {
    const std::vector<Json>& records = state_.search_records;
    bool any_succeeded = false;
    for (const auto& record : records)
      any_succeeded = any_succeeded || record["status"] != "failed";
    const size_t limit = any_succeeded ? kConsecutiveFailures : kFailuresWhileNoneSucceeded;
    if (records.size() < limit) return;
    for (size_t back = 1; back <= limit; ++back)
      if (records[records.size() - back]["status"] != "failed") return;
    const Json& last = records.back();
    fail(last_failure_category_,
         "ipj tune: the last " + std::to_string(limit) + " trials failed" +
             (any_succeeded ? " in a row" : " (every trial so far)") +
             "; the search stops instead of spending " + "the budget on the same error. Trial " +
             last["trial"].dump() + ": " + last["reason"].get<std::string>() +
             ". Fix the cause, then continue with `ipj tune --out " + options_.out_dir +
             " --resume` (the failed trials stay in " + path(kTrialLogName) + ")");
  }

  // One run of a search trial's recipe on another seed, to its end, logged under `phase` (confirm or
  // heldout); stopped only when another epoch would pass the budget with `reserve` kept for the runs after it
  // (status `budget`).
  void run_again(const char* phase, const std::string& label, const TrialSummary& trial, std::uint64_t seed,
                 double reserve) {
    const std::vector<Json>& records =
        std::string(phase) == "confirm" ? state_.confirm_records : state_.heldout_records;
    if (SearchState::find_record(records, trial.trial, seed) != nullptr) return;  // done before a resume
    say(label + " of trial " + std::to_string(trial.trial) + " on seed " + std::to_string(seed));
    const Candidate candidate = candidate_for(trial.point);
    const double power_limit_w = set_power_limit(candidate);
    const Json recipe = state_.search_records.at(static_cast<size_t>(trial.trial))["recipe"];
    double run_cost = 0.0, largest_epoch = 0.0;
    StopDecision decision;
    const StopCheck should_stop = [&](const EpochPoint& epoch) {
      run_cost += state_.epoch_cost(epoch);
      largest_epoch = std::max(largest_epoch, state_.epoch_cost(epoch));
      const bool last_epoch = epoch.epoch >= recipe.value("epochs", 0);  // the run ends there anyway
      if (!last_epoch && state_.next_epoch_passes_budget(run_cost, largest_epoch, reserve))
        decision = {true, "budget", "another epoch would pass the budget"};
      return decision.stop;
    };
    const TrialOutcome outcome = runner_.run({trial.trial, recipe, seed, options_.target_acc}, should_stop);
    const Json record =
        log_run({phase, trial.trial, seed, &candidate, &trial.point, power_limit_w}, outcome, decision);
    say("  -> " + record["status"].get<std::string>() +
        (record["reached_target"].get<bool>()
             ? ": " + format("%.1f", record["energy_to_target_j"].get<double>()) + " J"
             : ""));
  }

  // The finalists' runs on the confirmation seed, best first; a finalist is confirmed only while its run and
  // the held-out runs after it fit in the budget (estimated at full length), else it is cut.
  void run_confirmations() {
    const std::vector<const TrialSummary*> candidates = state_.confirm_candidates();
    const TrialSummary* best = state_.incumbent();
    for (size_t index = 0; index < candidates.size(); ++index) {
      const TrialSummary& candidate = *candidates[index];
      if (SearchState::find_record(state_.confirm_records, candidate.trial, state_.confirm_seed()) != nullptr)
        continue;
      // As the search's reserve counted them: the held-out runs at the search seed's best (should another
      // finalist win and cost more, run_heldout cuts runs rather than pass the budget).
      const double heldout_need =
          state_.heldout_runs_left(best->trial) * state_.full_run_estimate(best->trial);
      if (state_.spent() + state_.full_run_estimate(candidate.trial) + heldout_need > options_.budget.limit) {
        ++state_.confirmations_cut;
        say("confirmation run of trial " + std::to_string(candidate.trial) +
            " skipped: it and the held-out runs would not fit in the " + state_.budget_text());
        continue;
      }
      run_again("confirm",
                "confirmation run " + std::to_string(index + 1) + "/" + std::to_string(candidates.size()),
                candidate, state_.confirm_seed(), heldout_need);
    }
  }

  // The winner on the held-out seeds; a run whose full-length estimate would pass the budget is cut (it
  // and the ones after it: fewer held-out seeds, reported as heldout_summary.cut_for_budget).
  void run_heldout() {
    const TrialSummary* best = state_.winner();
    if (best == nullptr) return;
    for (int run = 1; run <= options_.heldout_runs; ++run) {
      const std::uint64_t seed = options_.seed + static_cast<std::uint64_t>(run);
      if (SearchState::find_record(state_.heldout_records, best->trial, seed) != nullptr) continue;
      if (state_.spent() + state_.full_run_estimate(best->trial) > options_.budget.limit) {
        state_.heldout_cut = state_.heldout_runs_left(best->trial);
        say(std::to_string(state_.heldout_cut) + " held-out run(s) cut: a run of the winner (up to " +
            format("%.1f", state_.full_run_estimate(best->trial)) + " " +
            budget_unit_symbol(options_.budget.unit) + ") would pass the " + state_.budget_text());
        return;
      }
      run_again("heldout",
                "held-out run " + std::to_string(run) + "/" + std::to_string(options_.heldout_runs), *best,
                seed, 0.0);
    }
  }

  // tune.json, and recipe.json when a best trial exists.
  Json finish() {
    const Json report = tune_report_json(state_, space_);
    if (!report["best"].is_null()) write_json_file(path(kRecipeName), tuned_recipe_json(report));
    write_json_file(path(kReportName), report);
    return report;
  }

  const TuneOptions& options_;
  const SearchSpace& space_;
  TrialRunner& runner_;
  Proposer proposer_;
  SearchState state_;
  ErrorCategory last_failure_category_ = ErrorCategory::runtime;
};

}  // namespace

void check_out_folder(const std::string& out_dir, bool resume) {
  if (out_dir.empty())
    fail(ErrorCategory::usage, "--out DIR is required (trials.jsonl, recipe.json, tune.json)");
  const fs::path folder(out_dir);
  const bool holds_run = fs::exists(folder / kTrialLogName) || fs::exists(folder / kSettingsName);
  if (!resume && holds_run)
    fail(ErrorCategory::usage,
         "--out " + out_dir +
             " already holds a tune run: add --resume to continue it, or choose a new folder");
  if (resume && !fs::exists(folder / kSettingsName))
    fail(ErrorCategory::usage, "--resume: " + (folder / kSettingsName).string() +
                                   " does not exist; start the run without --resume first");
}

Json run_tune(const TuneOptions& options, const SearchSpace& space, TrialRunner& runner) {
  return Search(options, space, runner).run();
}

}  // namespace ipj::tune
