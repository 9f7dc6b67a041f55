// `ipj compare --repeat N`: the spread of each side's figures over the repeats, and the machine load of
// several runs folded into one record. Pure JSON arithmetic: no LibTorch.
#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "ipj/train/compare.hpp"

namespace ipj::train {
namespace {

// How each figure of a LoadSample record (device::to_json) is folded over runs.
enum class Fold { mean, max, sum, any };

Fold fold_of(const std::string& key) {
  if (key == "other_cpus_max") return Fold::max;
  if (key == "throttled_periods" || key == "window_s") return Fold::sum;
  if (key == "busy") return Fold::any;
  return Fold::mean;
}

// One figure over several records: null when no record has a number for it.
Json fold(const std::vector<Json>& records, const std::string& key) {
  const Fold how = fold_of(key);
  if (how == Fold::any) {
    bool any = false;
    for (const Json& record : records)
      any = any || record.value(key, false);
    return any;
  }
  double total = 0.0, largest = 0.0;
  int count = 0;
  for (const Json& record : records) {
    if (!record.contains(key) || !record[key].is_number()) continue;
    const double value = record[key].get<double>();
    total += value;
    largest = count == 0 ? value : std::max(largest, value);
    ++count;
  }
  if (count == 0) return nullptr;
  if (how == Fold::max) return largest;
  if (how == Fold::sum)
    return key == "throttled_periods" ? Json(static_cast<std::int64_t>(total)) : Json(total);
  return std::round(total / count * 1000.0) / 1000.0;
}

Json fold_samples(const std::vector<Json>& records) {
  std::set<std::string> keys;
  Json folded = Json::object();
  for (const Json& record : records)
    for (const auto& item : record.items())
      if (keys.insert(item.key()).second) folded[item.key()] = fold(records, item.key());
  return folded;
}

}  // namespace

Json spread_of(const std::vector<Json>& values) {
  std::vector<double> numbers;
  for (const Json& value : values)
    if (value.is_number()) numbers.push_back(value.get<double>());
  Json spread{{"runs", values.size()}, {"missing", values.size() - numbers.size()}};
  if (numbers.empty()) {
    for (const char* key : {"mean", "min", "max", "stddev", "relative_range"})
      spread[key] = nullptr;
  } else {
    double mean = 0.0;
    for (double number : numbers)
      mean += number;
    mean /= static_cast<double>(numbers.size());
    double squares = 0.0;
    for (double number : numbers)
      squares += (number - mean) * (number - mean);
    const auto [low, high] = std::minmax_element(numbers.begin(), numbers.end());
    spread["mean"] = mean;
    spread["min"] = *low;
    spread["max"] = *high;
    // Sample standard deviation (n - 1); 0 for one run.
    spread["stddev"] =
        numbers.size() > 1 ? std::sqrt(squares / static_cast<double>(numbers.size() - 1)) : 0.0;
    spread["relative_range"] = mean > 0.0 ? Json((*high - *low) / mean) : Json(nullptr);
  }
  spread["samples"] = values;
  return spread;
}

Json combine_machine_loads(const std::vector<Json>& loads) {
  std::vector<Json> before, during;
  bool busy = false;
  for (const Json& load : loads) {
    if (!load.is_object()) continue;
    if (load.contains("before")) before.push_back(load["before"]);
    if (load.contains("during")) during.push_back(load["during"]);
    busy = busy || load.value("busy", false);
  }
  Json combined{{"before", fold_samples(before)}, {"during", fold_samples(during)}, {"busy", busy}};
  if (!loads.empty() && loads.front().is_object() && loads.front().contains("rule"))
    combined["rule"] = loads.front()["rule"];
  return combined;
}

}  // namespace ipj::train
