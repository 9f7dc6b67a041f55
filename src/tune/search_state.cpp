// The tuner's knowledge so far: trial records by phase, the budget spent and reserved, the incumbent and the
// winner (search_state.hpp). No runs and no files here: tuner.cpp runs trials, tune_result.cpp writes JSON.
#include "search_state.hpp"

#include <algorithm>

#include "ipj/core/number_format.hpp"

namespace ipj::tune {

std::string budget_unit_symbol(BudgetUnit unit) {
  return unit == BudgetUnit::seconds ? "s" : "J";
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

void SearchState::add_record(const Json& record) {
  const std::string phase = record.value("phase", std::string());
  if (phase == "search") {
    search_records.push_back(record);
    history.push_back(summary_of(record, options.target_acc));
    spent_search += cost(record);
  } else if (phase == "heldout") {
    heldout_records.push_back(record);
    spent_heldout += cost(record);
  } else if (phase == "confirm") {
    confirm_records.push_back(record);
    spent_confirm += cost(record);
  }
}

const Json* SearchState::find_record(const std::vector<Json>& records, int trial, std::uint64_t seed) {
  for (const auto& record : records)
    if (record.value("trial", -1) == trial && record.value("seed", std::uint64_t{0}) == seed) return &record;
  return nullptr;
}

std::vector<const TrialSummary*> SearchState::confirm_candidates() const {
  std::vector<const TrialSummary*> reached;
  for (const auto& summary : history)
    if (summary.reached) reached.push_back(&summary);
  std::stable_sort(reached.begin(), reached.end(),
                   [](const TrialSummary* a, const TrialSummary* b) { return rank_key(*a) < rank_key(*b); });
  if (static_cast<int>(reached.size()) > options.confirm_top)
    reached.resize(static_cast<size_t>(options.confirm_top));
  return reached;
}

const TrialSummary* SearchState::winner() const {
  const TrialSummary* best = nullptr;
  double best_joules = 0.0, best_seconds = 0.0;
  for (const TrialSummary* candidate : confirm_candidates()) {
    const Json* confirmed = find_record(confirm_records, candidate->trial, confirm_seed());
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

const TrialSummary* SearchState::incumbent() const {
  const TrialSummary* best = nullptr;
  for (const auto& summary : history)
    if (summary.reached && (best == nullptr || rank_key(summary) < rank_key(*best))) best = &summary;
  return best;
}

bool SearchState::confirmed_on_second_seed(const TrialSummary* trial) const {
  const Json* record = trial ? find_record(confirm_records, trial->trial, confirm_seed()) : nullptr;
  return record != nullptr && (*record)["reached_target"].get<bool>();
}

double SearchState::full_run_estimate(int trial) const {
  return tune::full_run_estimate(search_records.at(static_cast<size_t>(trial)), options.budget.unit);
}

double SearchState::first_epoch_estimate() const {
  double largest = 0.0;
  for (const auto& record : search_records) {
    const RunCostParts parts = cost_parts(record, options.budget.unit);
    largest = std::max(largest, parts.setup + parts.first_epoch);
  }
  return largest;
}

double SearchState::largest_setup() const {
  double largest = 0.0;
  for (const auto& record : search_records)
    largest = std::max(largest, cost_parts(record, options.budget.unit).setup);
  return largest;
}

int SearchState::heldout_runs_left(int trial) const {
  int left = 0;
  for (int run = 1; run <= options.heldout_runs; ++run)
    left += find_record(heldout_records, trial, options.seed + static_cast<std::uint64_t>(run)) == nullptr;
  return left;
}

double SearchState::heldout_reserve() const {
  const TrialSummary* best = incumbent();
  if (best == nullptr) return 0.0;
  const double best_cost = full_run_estimate(best->trial);
  double reserve = heldout_runs_left(best->trial) * best_cost;
  const std::vector<const TrialSummary*> candidates = confirm_candidates();
  reserve += std::max(0, options.confirm_top - static_cast<int>(candidates.size())) * best_cost;
  for (const TrialSummary* candidate : candidates)
    if (find_record(confirm_records, candidate->trial, confirm_seed()) == nullptr)
      reserve += full_run_estimate(candidate->trial);
  return reserve;
}

bool SearchState::budget_left_for_trial() const {
  return spent() + heldout_reserve() + first_epoch_estimate() < options.budget.limit;
}

bool SearchState::next_epoch_passes_budget(double run_cost, double largest_epoch, double reserve) const {
  return spent() + largest_setup() + run_cost + largest_epoch + reserve > options.budget.limit;
}

std::string SearchState::budget_text() const {
  const double left = std::max(0.0, options.budget.limit - spent());
  return "budget left " + format_number("%.0f", left) + " " + budget_unit_symbol(options.budget.unit) +
         " of " + format_number("%.0f", options.budget.limit);
}

std::string SearchState::best_text() const {
  const TrialSummary* best = incumbent();
  return best ? "best " + format_number("%.1f", best->energy_to_target_j) + " J (trial " +
                    std::to_string(best->trial) + ")"
              : "no trial at the target yet";
}

}  // namespace ipj::tune
