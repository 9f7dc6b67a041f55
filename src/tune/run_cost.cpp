// Costs of trial runs from their records, and full-length estimates of runs to come (run_cost.hpp).
#include "ipj/tune/run_cost.hpp"

#include <algorithm>

namespace ipj::tune {

std::vector<EpochPoint> epochs_from_json(const Json& list) {
  std::vector<EpochPoint> epochs;
  for (const auto& item : list)
    epochs.push_back({item.value("epoch", 0), item.value("test_acc", 0.0), item.value("energy_j", 0.0),
                      item.value("wall_s", 0.0)});
  return epochs;
}

double run_cost(const Json& record, BudgetUnit unit) {
  return unit == BudgetUnit::seconds ? record.value("wall_s", 0.0) : record.value("energy_j", 0.0);
}

double epoch_cost(const EpochPoint& epoch, BudgetUnit unit) {
  return unit == BudgetUnit::seconds ? epoch.wall_s : epoch.energy_j;
}

RunCostParts cost_parts(const Json& record, BudgetUnit unit) {
  RunCostParts parts;
  const std::vector<EpochPoint> epochs = epochs_from_json(record.value("epochs", Json::array()));
  double epochs_total = 0.0;
  for (const auto& epoch : epochs) {
    epochs_total += epoch_cost(epoch, unit);
    parts.largest_epoch = std::max(parts.largest_epoch, epoch_cost(epoch, unit));
  }
  if (!epochs.empty()) parts.first_epoch = epoch_cost(epochs.front(), unit);
  parts.setup = std::max(0.0, run_cost(record, unit) - epochs_total);
  return parts;
}

double full_run_estimate(const Json& record, BudgetUnit unit) {
  const RunCostParts parts = cost_parts(record, unit);
  const int epoch_limit = record.contains("recipe") ? record["recipe"].value("epochs", 1) : 1;
  return parts.setup + parts.largest_epoch * std::max(epoch_limit, record.value("epochs_run", 1));
}

}  // namespace ipj::tune
