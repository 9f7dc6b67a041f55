// The JSON a tune run writes: one trial record per run (trials.jsonl) and the final report (tune.json) with
// the best recipe's provenance (recipe.json). Pure functions of the SearchState: no runs, no files.
#include <algorithm>
#include <filesystem>

#include "search_state.hpp"

namespace ipj::tune {
namespace {

Json number_or_null(bool present, double value) {
  return present ? Json(value) : Json(nullptr);
}

// The chosen trial: the winner, or when nobody reached the target the most accurate trial (flagged by its
// reached_target); null when every trial failed.
Json best_json(const SearchState& state) {
  const TrialSummary* best = state.winner();
  const Json* chosen = best ? &state.search_records.at(static_cast<size_t>(best->trial)) : nullptr;
  if (chosen == nullptr) {
    for (size_t index = 0; index < state.history.size(); ++index)
      if (!state.history[index].failed &&
          (chosen == nullptr ||
           rank_key(state.history[index]) < rank_key(summary_of(*chosen, state.options.target_acc))))
        chosen = &state.search_records[index];
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
              {"confirmed", state.confirmed_on_second_seed(best)}};
}

Json confirmations_json(const SearchState& state) {
  Json list = Json::array();
  for (const TrialSummary* candidate : state.confirm_candidates())
    if (const Json* record =
            SearchState::find_record(state.confirm_records, candidate->trial, state.confirm_seed()))
      list.push_back({{"trial", candidate->trial},
                      {"seed", state.confirm_seed()},
                      {"reached_target", (*record)["reached_target"]},
                      {"energy_to_target_j", (*record)["energy_to_target_j"]},
                      {"time_to_target_s", (*record)["time_to_target_s"]},
                      {"search_energy_to_target_j", candidate->energy_to_target_j},
                      {"test_acc", (*record)["test_acc"]}});
  return list;
}

// The best trial's held-out runs (into report["heldout_seeds"]) and their summary.
void add_heldout_json(const SearchState& state, const Json& best, Json& report) {
  Json heldout = Json::array();
  std::vector<double> joules, seconds, accuracy;
  int missed = 0, stopped_for_budget = 0;
  for (const auto& record : state.heldout_records) {
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
  report["heldout_seeds"] = heldout;
  report["heldout_summary"] = {
      {"runs", heldout.size()},
      {"requested", best.is_null() || !best["reached_target"].get<bool>() ? 0 : state.options.heldout_runs},
      {"cut_for_budget", state.heldout_cut},
      {"stopped_for_budget", stopped_for_budget},
      {"missed_target", missed},
      {"energy_to_target_j", spread_of(joules)},
      {"time_to_target_s", spread_of(seconds)},
      {"test_acc", spread_of(accuracy)}};
}

Json budget_json(const SearchState& state) {
  return {{"unit", budget_unit_symbol(state.options.budget.unit)},
          {"limit", state.options.budget.limit},
          {"search", state.spent_search},
          {"confirm", state.spent_confirm},
          {"heldout", state.spent_heldout},
          {"total", state.spent()},
          {"counts",
           "trial runs only (training + evaluation + model set-up); the confirmation and "
           "held-out runs are inside the budget: the search keeps their cost at full epoch "
           "length in reserve, and a run that would not fit is cut (confirmations_cut, "
           "heldout_summary.cut_for_budget); the total passes the limit only by how much one "
           "epoch or set-up ran longer than the largest before it"},
          {"session_wall_s", state.session_wall_s}};
}

Json search_json(const SearchState& state, const SearchSpace& space, std::size_t heldout_runs) {
  int pruned = 0, failed = 0, reached = 0;
  for (const auto& record : state.search_records) {
    const std::string status = record["status"];
    pruned += status == "pruned" || status == "bound";
    failed += status == "failed";
    reached += status == "reached";
  }
  return {{"seed", state.options.seed},
          {"sessions", state.session},
          {"trials", state.search_records.size()},
          {"reached", reached},
          {"stopped_early", pruned},
          {"failed", failed},
          {"confirmations_cut", state.confirmations_cut},
          {"stopped_because", state.stopped_because},
          {"space_size", space_size(space)},
          {"heldout_seeds", heldout_runs}};
}

}  // namespace

Json trial_record_json(const SearchState& state, const TrialRun& run, const TrialOutcome& outcome,
                       const StopDecision& decision) {
  TrialSummary summary;
  summary.epochs = outcome.epochs;
  settle_target(summary, state.options.target_acc);
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
              {"phase", run.phase},
              {"trial", run.trial},
              {"session", state.session},
              {"seed", run.seed},
              {"values", run.candidate->values},
              {"point", *run.point},
              {"recipe", run.candidate->recipe},
              {"power_limit_w", run.power_limit_w > 0.0 ? Json(run.power_limit_w) : Json(nullptr)},
              {"status", status},
              {"reason", outcome.error.empty() ? decision.reason : outcome.error},
              {"epochs", epochs},
              {"epochs_run", static_cast<int>(outcome.epochs.size())},
              {"test_acc", outcome.epochs.empty() ? 0.0 : outcome.epochs.back().test_acc},
              {"best_acc", best_acc},
              {"reached_target", summary.reached},
              {"target_epoch", summary.reached ? Json(summary.target_epoch) : Json(nullptr)},
              {"energy_to_target_j", number_or_null(summary.reached, summary.energy_to_target_j)},
              {"time_to_target_s", number_or_null(summary.reached, summary.time_to_target_s)},
              {"energy_j", outcome.energy_j},
              {"wall_s", outcome.wall_s},
              {"energy_source", energy::reported_source_name(outcome.energy_source)},
              {"error_category",
               outcome.error.empty() ? Json(nullptr) : Json(category_name(outcome.error_category))}};
}

Json tune_report_json(const SearchState& state, const SearchSpace& space) {
  const TuneOptions& options = state.options;
  const Json best = best_json(state);
  Json report;
  report["schema_version"] = kResultsSchemaVersion;
  report["kind"] = "tune";
  report["model"] = options.settings.value("model", std::string());
  report["target_acc"] = options.target_acc;
  report["objective"] = "energy_to_target_j (ties: time_to_target_s)";
  report["trials"] = state.search_records;
  report["pareto"] = pareto_front(state.search_records);
  report["best"] = best;
  report["confirmations"] = confirmations_json(state);
  add_heldout_json(state, best, report);
  report["budget"] = budget_json(state);
  report["search"] = search_json(state, space, report["heldout_seeds"].size());
  report["space"] = to_json(space);
  report["settings"] = options.settings;
  const auto path = [&options](const char* name) {
    return (std::filesystem::path(options.out_dir) / name).string();
  };
  report["files"] = {
      {"trials", path(kTrialLogName)}, {"recipe", path(kRecipeName)}, {"results", path(kReportName)}};
  return report;
}

Json tuned_recipe_json(const Json& report) {
  const Json& best = report["best"];
  Json provenance = {{"tool", "ipj tune"},
                     {"trial", best["trial"]},
                     {"reached_target", best["reached_target"]},
                     {"energy_to_target_j", best["energy_to_target_j"]},
                     {"time_to_target_s", best["time_to_target_s"]},
                     {"energy_source", best["energy_source"]},
                     {"heldout", report["heldout_summary"]},
                     {"power_limit_w", best["power_limit_w"]},
                     {"tuned_with", report["settings"]}};
  Json recipe = best["recipe"];
  recipe["provenance"] = provenance;
  return recipe;
}

}  // namespace ipj::tune
