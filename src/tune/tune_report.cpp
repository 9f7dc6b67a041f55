// The Pareto front of the trials, the spread of the held-out runs and the human-readable report of
// `ipj tune`.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "ipj/core/number_format.hpp"
#include "ipj/core/text_table.hpp"
#include "ipj/tune/search_space.hpp"
#include "ipj/tune/tuner.hpp"

namespace ipj::tune {
namespace {

std::string number(const Json& value, const char* pattern, const char* missing = "-") {
  return format_number(value, pattern, missing);
}

std::string settings_text(const Json& values, const Json& recipe) {
  return describe_values(values) + " lr=" + number(recipe.value("lr", Json()), "%.4g");
}

bool dominates(const Json& a, const Json& b) {
  const double acc_a = a["test_acc"], acc_b = b["test_acc"];
  const double joules_a = a["energy_j"], joules_b = b["energy_j"];
  const double time_a = a["wall_s"], time_b = b["wall_s"];
  const bool no_worse = acc_a >= acc_b && joules_a <= joules_b && time_a <= time_b;
  const bool better = acc_a > acc_b || joules_a < joules_b || time_a < time_b;
  return no_worse && better;
}

std::string spread_text(const Json& spread, const char* pattern) {
  if (spread.is_null()) return "none reached";
  return "mean " + number(spread["mean"], pattern) + " +- " + number(spread["stddev"], pattern) +
         ", median " + number(spread["median"], pattern) + " (range " + number(spread["min"], pattern) +
         " - " + number(spread["max"], pattern) + ")";
}

}  // namespace

Json spread_of(std::vector<double> values) {
  if (values.empty()) return nullptr;
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  const double median = values.size() % 2 ? values[middle] : 0.5 * (values[middle - 1] + values[middle]);
  double sum = 0.0;
  for (double value : values)
    sum += value;
  const double mean = sum / static_cast<double>(values.size());
  double squares = 0.0;
  for (double value : values)
    squares += (value - mean) * (value - mean);
  const double stddev = values.size() > 1 ? std::sqrt(squares / static_cast<double>(values.size() - 1)) : 0.0;
  return Json{{"mean", mean},          {"stddev", stddev},     {"median", median},
              {"min", values.front()}, {"max", values.back()}, {"count", values.size()}};
}

std::vector<Json> pareto_front(const std::vector<Json>& records) {
  std::vector<Json> candidates;
  for (const auto& record : records)
    if (record.value("status", std::string()) != "failed" && record.value("epochs_run", 0) > 0)
      candidates.push_back(record);
  std::vector<Json> front;
  for (const auto& record : candidates) {
    const bool dominated = std::any_of(candidates.begin(), candidates.end(),
                                       [&](const Json& other) { return dominates(other, record); });
    if (!dominated) front.push_back(record);
  }
  std::stable_sort(front.begin(), front.end(), [](const Json& a, const Json& b) {
    return a["energy_j"].get<double>() < b["energy_j"].get<double>();
  });
  return front;
}

std::string render_tune_report(const Json& report) {
  const Json& search = report["search"];
  const double target = report["target_acc"];
  std::string text = "tune " + report["model"].get<std::string>() + " to test accuracy " +
                     number(target, "%.3f") + ", objective: joules to the target (ties: time)\n";
  text += std::to_string(search["trials"].get<int>()) + " trials (" +
          std::to_string(search["reached"].get<int>()) + " reached the target, " +
          std::to_string(search["stopped_early"].get<int>()) + " stopped early, " +
          std::to_string(search["failed"].get<int>()) + " failed) in " +
          std::to_string(search["sessions"].get<int>()) +
          " session(s); the search stopped: " + search["stopped_because"].get<std::string>() + "\n\n";

  // The trials, best first (at most 20 rows; tune.json holds them all).
  std::vector<Json> trials(report["trials"].begin(), report["trials"].end());
  auto key = [](const Json& record) {
    const std::string status = record["status"];
    const int tier = status == "reached" ? 0 : status == "failed" ? 2 : 1;
    const double first =
        tier == 0 ? record["energy_to_target_j"].get<double>() : -record["best_acc"].get<double>();
    return std::make_pair(tier, first);
  };
  std::stable_sort(trials.begin(), trials.end(),
                   [&](const Json& a, const Json& b) { return key(a) < key(b); });
  TextTable table(
      {"trial", "status", "epochs", "test acc", "J to target", "s to target", "J total", "settings"});
  table.align_left(1);
  table.align_left(7);
  for (size_t index = 0; index < trials.size() && index < 20; ++index) {
    const Json& trial = trials[index];
    table.add_row({trial["trial"].dump(), trial["status"].get<std::string>(), trial["epochs_run"].dump(),
                   number(trial["test_acc"], "%.4f"), number(trial["energy_to_target_j"], "%.1f"),
                   number(trial["time_to_target_s"], "%.2f"), number(trial["energy_j"], "%.1f"),
                   settings_text(trial["values"], trial["recipe"])});
  }
  text += table.render();
  if (trials.size() > 20) text += "... " + std::to_string(trials.size() - 20) + " more trials in tune.json\n";

  std::string front;
  for (const auto& trial : report["pareto"])
    front += (front.empty() ? "" : ", ") + trial["trial"].dump() + " (" + number(trial["test_acc"], "%.4f") +
             ", " + number(trial["energy_j"], "%.1f J") + ", " + number(trial["wall_s"], "%.2f s") + ")";
  text += "\nPareto front (test accuracy vs joules and time): " + (front.empty() ? "none" : front) + "\n";

  const Json& best = report["best"];
  if (best.is_null()) {
    text += "best: none (every trial failed)\n";
  } else if (!best["reached_target"].get<bool>()) {
    text += "best: no trial reached " + number(target, "%.3f") + "; the most accurate was trial " +
            best["trial"].dump() + " (" + number(best["test_acc"], "%.4f") +
            "): raise the budget, widen the space or lower --target-acc\n";
  } else {
    text += "best: trial " + best["trial"].dump() + ": " + number(best["energy_to_target_j"], "%.1f J") +
            ", " + number(best["time_to_target_s"], "%.2f s") + " to " + number(target, "%.3f") + " (" +
            best["energy_source"].get<std::string>() + "): " + settings_text(best["values"], best["recipe"]) +
            "\n";
    std::string confirmations;
    for (const auto& run : report["confirmations"])
      confirmations += (confirmations.empty() ? "" : ", ") + std::string("trial ") + run["trial"].dump() +
                       " " + number(run["energy_to_target_j"], "%.1f J", "missed");
    if (!confirmations.empty())
      text += "confirmation seed (" + report["confirmations"][0]["seed"].dump() + "): " + confirmations +
              (best["confirmed"].get<bool>()
                   ? ""
                   : "; none reached the target there: chosen on the search seed alone") +
              "\n";
    const Json& summary = report["heldout_summary"];
    text += "held-out seeds (" + std::to_string(report["heldout_seeds"].size()) +
            " runs, missed the target: " + summary["missed_target"].dump() + "): energy to target " +
            spread_text(summary["energy_to_target_j"], "%.1f J") + ", time " +
            spread_text(summary["time_to_target_s"], "%.2f s") + ", test acc " +
            spread_text(summary["test_acc"], "%.4f") + "\n";
    if (summary.value("cut_for_budget", 0) > 0 || summary.value("stopped_for_budget", 0) > 0)
      text += "held-out runs cut to stay within the budget: " + summary["cut_for_budget"].dump() +
              " not run, " + summary["stopped_for_budget"].dump() +
              " stopped part-way (raise the budget for " + summary["requested"].dump() + ")\n";
  }
  const Json& budget = report["budget"];
  const std::string unit = budget["unit"];
  text +=
      "budget: " + number(budget["limit"], "%.0f ") + unit + "; spent " + number(budget["search"], "%.1f ") +
      unit + " on the search + " + number(budget["confirm"], "%.1f ") + unit + " on confirmation runs + " +
      number(budget["heldout"], "%.1f ") + unit + " on held-out runs = " + number(budget["total"], "%.1f ") +
      unit + " (trial runs only)" +
      (report["search"].value("confirmations_cut", 0) > 0
           ? "; " + report["search"]["confirmations_cut"].dump() + " confirmation run(s) cut for the budget"
           : "") +
      "\n";
  text += "files: " + report["files"]["trials"].get<std::string>() + ", " +
          report["files"]["results"].get<std::string>();
  if (!best.is_null())
    text += ", " + report["files"]["recipe"].get<std::string>() + " (ipj train --recipe " +
            report["files"]["recipe"].get<std::string>() + ")";
  return text + "\n";
}

}  // namespace ipj::tune
