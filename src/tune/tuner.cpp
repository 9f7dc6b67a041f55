// The search loop: folder checks and resume, budget, early stopping per epoch, the trial log, held-out runs,
// recipe.json and tune.json.
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

namespace ipj::tune {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kFailuresWhileNoneSucceeded = 3;
constexpr size_t kConsecutiveFailures = 6;
namespace fs = std::filesystem;

std::string unit_symbol(BudgetUnit unit) {
  return unit == BudgetUnit::seconds ? "s" : "J";
}

std::string format(const char* pattern, double value) {
  return format_number(pattern, value);
}

Json or_null(bool present, double value) {
  return present ? Json(value) : Json(nullptr);
}

TrialSummary summary_of(const Json& record, double target_acc) {
  TrialSummary summary;
  summary.trial = record.value("trial", 0);
  for (const auto& index : record.value("point", Json::array()))
    summary.point.push_back(index.get<int>());
  summary.failed = record.value("status", std::string()) == "failed";
  summary.epochs = epochs_from_json(record.value("epochs", Json::array()));
  settle_target(summary, target_acc);
  return summary;
}

class Search {
 public:
  Search(const TuneOptions& options, const SearchSpace& space, TrialRunner& runner)
      : options_(options), space_(space), runner_(runner), proposer_(space, options.seed) {}

  Json run() {
    const auto session_start = Clock::now();
    open_folder();
    while (true) {
      if (options_.max_trials > 0 && static_cast<int>(history_.size()) >= options_.max_trials) {
        stopped_because_ = "max_trials";
        break;
      }
      if (!budget_left_for_trial()) {
        stopped_because_ = "budget";
        break;
      }
      const int index = static_cast<int>(history_.size());
      const std::optional<Point> point = proposer_.propose(index, history_);
      if (!point) {
        stopped_because_ = "space exhausted";
        break;
      }
      run_search_trial(index, *point);
      give_up_after_repeated_failures();
    }
    run_confirmations();
    run_heldout();
    session_wall_s_ = std::chrono::duration<double>(Clock::now() - session_start).count();
    return finish();
  }

 private:
  void say(const std::string& line) const {
    if (options_.show_progress) std::fprintf(stderr, "[tune] %s\n", line.c_str());
  }

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
      const std::string phase = record.value("phase", std::string());
      if (phase == "search") {
        search_records_.push_back(record);
        history_.push_back(summary_of(record, options_.target_acc));
        spent_search_ += cost(record);
      } else if (phase == "heldout") {
        heldout_records_.push_back(record);
        spent_heldout_ += cost(record);
      } else if (phase == "confirm") {
        confirm_records_.push_back(record);
        spent_confirm_ += cost(record);
      }
    }
    session_ = last_session + 1;
    if (!log.records.empty())
      say("resuming: " + std::to_string(search_records_.size()) + " finished trial(s) and " +
          std::to_string(confirm_records_.size() + heldout_records_.size()) +
          " confirmation/held-out run(s) from " + path(kTrialLogName) + " are kept, none re-run");
  }

  double cost(const Json& record) const { return run_cost(record, options_.budget.unit); }
  double spent() const { return spent_search_ + spent_confirm_ + spent_heldout_; }
  std::uint64_t confirm_seed() const { return options_.seed + kConfirmSeedOffset; }

  static const Json* find_record(const std::vector<Json>& records, int trial, std::uint64_t seed) {
    for (const auto& record : records)
      if (record.value("trial", -1) == trial && record.value("seed", std::uint64_t{0}) == seed)
        return &record;
    return nullptr;
  }

  // The best `confirm_top` trials that reached the target on the search seed, best first.
  std::vector<const TrialSummary*> confirm_candidates() const {
    std::vector<const TrialSummary*> reached;
    for (const auto& summary : history_)
      if (summary.reached) reached.push_back(&summary);
    std::stable_sort(reached.begin(), reached.end(), [](const TrialSummary* a, const TrialSummary* b) {
      return rank_key(*a) < rank_key(*b);
    });
    if (static_cast<int>(reached.size()) > options_.confirm_top)
      reached.resize(static_cast<size_t>(options_.confirm_top));
    return reached;
  }

  // The winner: among the candidates that also reached the target on the confirmation seed, the lowest mean
  // joules to the target over both seeds (ties: mean time); the search's best when none did or without
  // confirmation runs.
  const TrialSummary* winner() const {
    const TrialSummary* best = nullptr;
    double best_joules = 0.0, best_seconds = 0.0;
    for (const TrialSummary* candidate : confirm_candidates()) {
      const Json* confirmed = find_record(confirm_records_, candidate->trial, confirm_seed());
      if (confirmed == nullptr || !(*confirmed)["reached_target"].get<bool>()) continue;
      const double joules =
          0.5 * (candidate->energy_to_target_j + (*confirmed)["energy_to_target_j"].get<double>());
      const double seconds =
          0.5 * (candidate->time_to_target_s + (*confirmed)["time_to_target_s"].get<double>());
      if (best == nullptr || joules < best_joules || (joules == best_joules && seconds < best_seconds)) {
        best = candidate;
        best_joules = joules;
        best_seconds = seconds;
      }
    }
    return best ? best : incumbent();
  }

  const TrialSummary* incumbent() const {
    const TrialSummary* best = nullptr;
    for (const auto& summary : history_)
      if (summary.reached && (best == nullptr || rank_key(summary) < rank_key(*best))) best = &summary;
    return best;
  }

  double epoch_cost(const EpochPoint& epoch) const { return tune::epoch_cost(epoch, options_.budget.unit); }

  // One more run of a search trial's recipe, at its full epoch length (run_cost.hpp).
  double full_run_estimate(int trial) const {
    return tune::full_run_estimate(search_records_.at(static_cast<size_t>(trial)), options_.budget.unit);
  }

  // The largest set-up plus first epoch of the search runs so far: what a new trial costs at least before
  // the tuner can stop it (0 before the first trial).
  double first_epoch_estimate() const {
    double largest = 0.0;
    for (const auto& record : search_records_) {
      const RunCostParts parts = cost_parts(record, options_.budget.unit);
      largest = std::max(largest, parts.setup + parts.first_epoch);
    }
    return largest;
  }

  double largest_setup() const {
    double largest = 0.0;
    for (const auto& record : search_records_)
      largest = std::max(largest, cost_parts(record, options_.budget.unit).setup);
    return largest;
  }

  int heldout_runs_left(int trial) const {
    int left = 0;
    for (int run = 1; run <= options_.heldout_runs; ++run)
      left +=
          find_record(heldout_records_, trial, options_.seed + static_cast<std::uint64_t>(run)) == nullptr;
    return left;
  }

  // The confirmation and held-out runs still to come, each estimated at its recipe's full epoch limit
  // (full_run_estimate): each candidate's own for its confirmation (the incumbent's for candidates still to
  // come), the incumbent's for the held-out runs.
  double heldout_reserve() const {
    const TrialSummary* best = incumbent();
    if (best == nullptr) return 0.0;
    const double best_cost = full_run_estimate(best->trial);
    double reserve = heldout_runs_left(best->trial) * best_cost;
    const std::vector<const TrialSummary*> candidates = confirm_candidates();
    reserve += std::max(0, options_.confirm_top - static_cast<int>(candidates.size())) * best_cost;
    for (const TrialSummary* candidate : candidates)
      if (find_record(confirm_records_, candidate->trial, confirm_seed()) == nullptr)
        reserve += full_run_estimate(candidate->trial);
    return reserve;
  }

  // A new trial starts only when its first epoch (estimated from the trials so far) and the reserve fit.
  bool budget_left_for_trial() const {
    return spent() + heldout_reserve() + first_epoch_estimate() < options_.budget.limit;
  }

  // After an epoch of a run that has cost `run_cost` so far (its largest epoch `largest_epoch`): whether
  // one more epoch like its largest, with `reserve` kept for what follows, would pass the budget.
  bool next_epoch_passes_budget(double run_cost, double largest_epoch, double reserve) const {
    return spent() + largest_setup() + run_cost + largest_epoch + reserve > options_.budget.limit;
  }

  std::string budget_text() const {
    const double left = std::max(0.0, options_.budget.limit - spent());
    return "budget left " + format("%.0f", left) + " " + unit_symbol(options_.budget.unit) + " of " +
           format("%.0f", options_.budget.limit);
  }

  // The per-epoch decision for a search trial: budget, then the incumbent bound, then successive halving.
  StopDecision judge(const TrialSummary& current, double trial_cost, double largest_epoch) const {
    const EpochPoint& last = current.epochs.back();
    if (last.test_acc >= options_.target_acc) return {};  // the trainer stops there by itself
    if (next_epoch_passes_budget(trial_cost, largest_epoch, heldout_reserve()))
      return {true, "budget",
              "another epoch would pass the budget (confirmation and held-out runs reserved)"};
    if (const TrialSummary* best = incumbent()) {
      double joules = 0.0;
      for (const auto& epoch : current.epochs)
        joules += epoch.energy_j;
      if (joules >= best->energy_to_target_j)
        return {true, "bound",
                "already spent " + format("%.1f", joules) + " J without reaching the target; trial " +
                    std::to_string(best->trial) + " reached it with " +
                    format("%.1f", best->energy_to_target_j) + " J"};
    }
    return successive_halving(history_, current, space_.settings);
  }

  Json record_for(const char* phase, int trial, std::uint64_t seed, const Candidate& candidate,
                  const Point& point, double power_limit_w, const TrialOutcome& outcome,
                  const StopDecision& decision) const {
    TrialSummary summary;
    summary.epochs = outcome.epochs;
    settle_target(summary, options_.target_acc);
    Json epochs = Json::array();
    double best_acc = 0.0;
    for (const auto& epoch : outcome.epochs) {
      epochs.push_back({{"epoch", epoch.epoch},
                        {"test_acc", epoch.test_acc},
                        {"energy_j", epoch.energy_j},
                        {"wall_s", epoch.wall_s}});
      best_acc = std::max(best_acc, epoch.test_acc);
    }
    std::string status = summary.reached ? "reached" : decision.stop ? decision.status : "missed";
    if (!outcome.error.empty()) status = "failed";
    return Json{{"schema_version", kResultsSchemaVersion},
                {"kind", "tune-trial"},
                {"phase", phase},
                {"trial", trial},
                {"session", session_},
                {"seed", seed},
                {"values", candidate.values},
                {"point", point},
                {"recipe", candidate.recipe},
                {"power_limit_w", power_limit_w > 0.0 ? Json(power_limit_w) : Json(nullptr)},
                {"status", status},
                {"reason", outcome.error.empty() ? decision.reason : outcome.error},
                {"epochs", epochs},
                {"epochs_run", static_cast<int>(outcome.epochs.size())},
                {"test_acc", outcome.epochs.empty() ? 0.0 : outcome.epochs.back().test_acc},
                {"best_acc", best_acc},
                {"reached_target", summary.reached},
                {"target_epoch", summary.reached ? Json(summary.target_epoch) : Json(nullptr)},
                {"energy_to_target_j", or_null(summary.reached, summary.energy_to_target_j)},
                {"time_to_target_s", or_null(summary.reached, summary.time_to_target_s)},
                {"energy_j", outcome.energy_j},
                {"wall_s", outcome.wall_s},
                {"energy_source", outcome.energy_source},
                {"error_category",
                 outcome.error.empty() ? Json(nullptr) : Json(category_name(outcome.error_category))}};
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

  std::string best_text() const {
    const TrialSummary* best = incumbent();
    return best ? "best " + format("%.1f", best->energy_to_target_j) + " J (trial " +
                      std::to_string(best->trial) + ")"
                : "no trial at the target yet";
  }

  void run_search_trial(int index, const Point& point) {
    const Candidate candidate = candidate_for(point);
    say("trial " + std::to_string(index) + " (" + best_text() + ", " + budget_text() +
        "): " + describe(candidate));
    const double power_limit_w = set_power_limit(candidate);
    TrialSummary current;
    current.trial = index;
    current.point = point;
    double trial_cost = 0.0, largest_epoch = 0.0;
    StopDecision decision;
    const StopCheck should_stop = [&](const EpochPoint& epoch) {
      current.epochs.push_back(epoch);
      trial_cost += epoch_cost(epoch);
      largest_epoch = std::max(largest_epoch, epoch_cost(epoch));
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
        record_for("search", index, options_.seed, candidate, point, power_limit_w, outcome, decision);
    append_trial_record(path(kTrialLogName), record);
    search_records_.push_back(record);
    history_.push_back(summary_of(record, options_.target_acc));
    spent_search_ += cost(record);
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
    bool any_succeeded = false;
    for (const auto& record : search_records_)
      any_succeeded = any_succeeded || record["status"] != "failed";
    const size_t limit = any_succeeded ? kConsecutiveFailures : kFailuresWhileNoneSucceeded;
    if (search_records_.size() < limit) return;
    for (size_t back = 1; back <= limit; ++back)
      if (search_records_[search_records_.size() - back]["status"] != "failed") return;
    const Json& last = search_records_.back();
    fail(last_failure_category_,
         "ipj tune: the last " + std::to_string(limit) + " trials failed" +
             (any_succeeded ? " in a row" : " (every trial so far)") +
             "; the search stops instead of spending " + "the budget on the same error. Trial " +
             last["trial"].dump() + ": " + last["reason"].get<std::string>() +
             ". Fix the cause, then continue with `ipj tune --out " + options_.out_dir +
             " --resume` (the failed trials stay in " + path(kTrialLogName) + ")");
  }

  // One run of a search trial's recipe on another seed, to its end, logged under `phase`; stopped only when
  // another epoch would pass the budget with `reserve` kept for the runs after it (status `budget`).
  void run_again(const char* phase, const std::string& label, const TrialSummary& trial, std::uint64_t seed,
                 double reserve, std::vector<Json>& records, double& spent) {
    if (find_record(records, trial.trial, seed) != nullptr) return;  // done before a resume
    say(label + " of trial " + std::to_string(trial.trial) + " on seed " + std::to_string(seed));
    const Candidate candidate = candidate_for(trial.point);
    const double power_limit_w = set_power_limit(candidate);
    const Json& recipe = search_records_.at(static_cast<size_t>(trial.trial))["recipe"];
    double run_cost = 0.0, largest_epoch = 0.0;
    StopDecision decision;
    const StopCheck should_stop = [&](const EpochPoint& epoch) {
      run_cost += epoch_cost(epoch);
      largest_epoch = std::max(largest_epoch, epoch_cost(epoch));
      const bool last_epoch = epoch.epoch >= recipe.value("epochs", 0);  // the run ends there anyway
      if (!last_epoch && next_epoch_passes_budget(run_cost, largest_epoch, reserve))
        decision = {true, "budget", "another epoch would pass the budget"};
      return decision.stop;
    };
    const TrialOutcome outcome = runner_.run({trial.trial, recipe, seed, options_.target_acc}, should_stop);
    const Json record =
        record_for(phase, trial.trial, seed, candidate, trial.point, power_limit_w, outcome, decision);
    append_trial_record(path(kTrialLogName), record);
    records.push_back(record);
    spent += cost(record);
    say("  -> " + record["status"].get<std::string>() +
        (record["reached_target"].get<bool>()
             ? ": " + format("%.1f", record["energy_to_target_j"].get<double>()) + " J"
             : ""));
  }

  // The finalists' runs on the confirmation seed, best first; a finalist is confirmed only while its run and
  // the held-out runs after it fit in the budget (estimated at full length), else it is cut.
  void run_confirmations() {
    const std::vector<const TrialSummary*> candidates = confirm_candidates();
    const TrialSummary* best = incumbent();
    for (size_t index = 0; index < candidates.size(); ++index) {
      const TrialSummary& candidate = *candidates[index];
      if (find_record(confirm_records_, candidate.trial, confirm_seed()) != nullptr) continue;
      // As the search's reserve counted them: the held-out runs at the search seed's best (should another
      // finalist win and cost more, run_heldout cuts runs rather than pass the budget).
      const double heldout_need = heldout_runs_left(best->trial) * full_run_estimate(best->trial);
      if (spent() + full_run_estimate(candidate.trial) + heldout_need > options_.budget.limit) {
        ++confirmations_cut_;
        say("confirmation run of trial " + std::to_string(candidate.trial) +
            " skipped: it and the held-out runs would not fit in the " + budget_text());
        continue;
      }
      run_again("confirm",
                "confirmation run " + std::to_string(index + 1) + "/" + std::to_string(candidates.size()),
                candidate, confirm_seed(), heldout_need, confirm_records_, spent_confirm_);
    }
  }

  // The winner on the held-out seeds; a run whose full-length estimate would pass the budget is cut (it
  // and the ones after it: fewer held-out seeds, reported as heldout_summary.cut_for_budget).
  void run_heldout() {
    const TrialSummary* best = winner();
    if (best == nullptr) return;
    for (int run = 1; run <= options_.heldout_runs; ++run) {
      const std::uint64_t seed = options_.seed + static_cast<std::uint64_t>(run);
      if (find_record(heldout_records_, best->trial, seed) != nullptr) continue;
      if (spent() + full_run_estimate(best->trial) > options_.budget.limit) {
        heldout_cut_ = heldout_runs_left(best->trial);
        say(std::to_string(heldout_cut_) + " held-out run(s) cut: a run of the winner (up to " +
            format("%.1f", full_run_estimate(best->trial)) + " " + unit_symbol(options_.budget.unit) +
            ") would pass the " + budget_text());
        return;
      }
      run_again("heldout",
                "held-out run " + std::to_string(run) + "/" + std::to_string(options_.heldout_runs), *best,
                seed, 0.0, heldout_records_, spent_heldout_);
    }
  }

  Json confirmations_json() const {
    Json list = Json::array();
    for (const TrialSummary* candidate : confirm_candidates())
      if (const Json* record = find_record(confirm_records_, candidate->trial, confirm_seed()))
        list.push_back({{"trial", candidate->trial},
                        {"seed", confirm_seed()},
                        {"reached_target", (*record)["reached_target"]},
                        {"energy_to_target_j", (*record)["energy_to_target_j"]},
                        {"time_to_target_s", (*record)["time_to_target_s"]},
                        {"search_energy_to_target_j", candidate->energy_to_target_j},
                        {"test_acc", (*record)["test_acc"]}});
    return list;
  }

  bool confirmed_on_second_seed(const TrialSummary* trial) const {
    const Json* record = trial ? find_record(confirm_records_, trial->trial, confirm_seed()) : nullptr;
    return record != nullptr && (*record)["reached_target"].get<bool>();
  }

  Json best_json() const {
    const TrialSummary* best = winner();
    const Json* chosen = best ? &search_records_.at(static_cast<size_t>(best->trial)) : nullptr;
    if (chosen == nullptr) {  // nobody reached the target: the most accurate trial, flagged as such
      for (size_t index = 0; index < history_.size(); ++index)
        if (!history_[index].failed &&
            (chosen == nullptr ||
             rank_key(history_[index]) < rank_key(summary_of(*chosen, options_.target_acc))))
          chosen = &search_records_[index];
    }
    if (chosen == nullptr) return nullptr;
    return Json{{"trial", (*chosen)["trial"]},
                {"reached_target", (*chosen)["reached_target"]},
                {"recipe", (*chosen)["recipe"]},
                {"values", (*chosen)["values"]},
                {"energy_to_target_j", (*chosen)["energy_to_target_j"]},
                {"time_to_target_s", (*chosen)["time_to_target_s"]},
                {"test_acc", (*chosen)["test_acc"]},
                {"energy_source", (*chosen)["energy_source"]},
                {"power_limit_w", (*chosen)["power_limit_w"]},
                {"confirmed", confirmed_on_second_seed(best)}};
  }

  Json finish() {
    const Json best = best_json();
    Json heldout = Json::array();
    std::vector<double> joules, seconds, accuracy;
    int missed = 0, stopped_for_budget = 0;
    for (const auto& record : heldout_records_) {
      if (best.is_null() || record["trial"] != best["trial"]) continue;
      heldout.push_back({{"seed", record["seed"]},
                         {"reached_target", record["reached_target"]},
                         {"energy_to_target_j", record["energy_to_target_j"]},
                         {"time_to_target_s", record["time_to_target_s"]},
                         {"test_acc", record["test_acc"]},
                         {"epochs_run", record["epochs_run"]},
                         {"energy_j", record["energy_j"]},
                         {"wall_s", record["wall_s"]},
                         {"energy_source", record["energy_source"]}});
      if (record["status"] == "budget") {  // stopped so as not to pass the budget: no accuracy verdict
        ++stopped_for_budget;
        continue;
      }
      accuracy.push_back(record["test_acc"].get<double>());
      if (!record["reached_target"].get<bool>()) {
        ++missed;
        continue;
      }
      joules.push_back(record["energy_to_target_j"].get<double>());
      seconds.push_back(record["time_to_target_s"].get<double>());
    }
    int pruned = 0, failed = 0, reached = 0;
    for (const auto& record : search_records_) {
      const std::string status = record["status"];
      pruned += status == "pruned" || status == "bound";
      failed += status == "failed";
      reached += status == "reached";
    }
    Json report;
    report["schema_version"] = kResultsSchemaVersion;
    report["kind"] = "tune";
    report["model"] = options_.settings.value("model", std::string());
    report["target_acc"] = options_.target_acc;
    report["objective"] = "energy_to_target_j (ties: time_to_target_s)";
    report["trials"] = search_records_;
    report["pareto"] = pareto_front(search_records_);
    report["best"] = best;
    report["confirmations"] = confirmations_json();
    report["heldout_seeds"] = heldout;
    report["heldout_summary"] = {
        {"runs", heldout.size()},
        {"requested", best.is_null() || !best["reached_target"].get<bool>() ? 0 : options_.heldout_runs},
        {"cut_for_budget", heldout_cut_},
        {"stopped_for_budget", stopped_for_budget},
        {"missed_target", missed},
        {"energy_to_target_j", spread_of(joules)},
        {"time_to_target_s", spread_of(seconds)},
        {"test_acc", spread_of(accuracy)}};
    report["budget"] = {{"unit", unit_symbol(options_.budget.unit)},
                        {"limit", options_.budget.limit},
                        {"search", spent_search_},
                        {"confirm", spent_confirm_},
                        {"heldout", spent_heldout_},
                        {"total", spent()},
                        {"counts",
                         "trial runs only (training + evaluation + model set-up); the confirmation and "
                         "held-out runs are inside the budget: the search keeps their cost at full epoch "
                         "length in reserve, and a run that would not fit is cut (confirmations_cut, "
                         "heldout_summary.cut_for_budget); the total passes the limit only by how much one "
                         "epoch or set-up ran longer than the largest before it"},
                        {"session_wall_s", session_wall_s_}};
    report["search"] = {{"seed", options_.seed},
                        {"sessions", session_},
                        {"trials", search_records_.size()},
                        {"reached", reached},
                        {"stopped_early", pruned},
                        {"failed", failed},
                        {"confirmations_cut", confirmations_cut_},
                        {"stopped_because", stopped_because_},
                        {"space_size", space_size(space_)},
                        {"heldout_seeds", heldout.size()}};
    report["space"] = to_json(space_);
    report["settings"] = options_.settings;
    report["files"] = {
        {"trials", path(kTrialLogName)}, {"recipe", path(kRecipeName)}, {"results", path(kReportName)}};
    if (!best.is_null()) {
      Json provenance = {{"tool", "ipj tune"},
                         {"trial", best["trial"]},
                         {"reached_target", best["reached_target"]},
                         {"energy_to_target_j", best["energy_to_target_j"]},
                         {"time_to_target_s", best["time_to_target_s"]},
                         {"energy_source", best["energy_source"]},
                         {"heldout", report["heldout_summary"]},
                         {"power_limit_w", best["power_limit_w"]},
                         {"tuned_with", options_.settings}};
      Json recipe = best["recipe"];
      recipe["provenance"] = provenance;
      write_json_file(path(kRecipeName), recipe);
    }
    write_json_file(path(kReportName), report);
    return report;
  }

  const TuneOptions& options_;
  const SearchSpace& space_;
  TrialRunner& runner_;
  Proposer proposer_;
  std::vector<Json> search_records_;
  std::vector<Json> heldout_records_;
  std::vector<Json> confirm_records_;
  std::vector<TrialSummary> history_;
  double spent_search_ = 0.0;
  double spent_heldout_ = 0.0;
  double spent_confirm_ = 0.0;
  double session_wall_s_ = 0.0;
  int session_ = 1;
  std::string stopped_because_;
  ErrorCategory last_failure_category_ = ErrorCategory::runtime;
  int confirmations_cut_ = 0;
  int heldout_cut_ = 0;
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
