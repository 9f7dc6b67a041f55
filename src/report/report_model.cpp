// Names of metric categories (the `--metric` groups of `ipj gate`).
#include "ipj/report/report_model.hpp"

namespace ipj::report {

const char* category_name(MetricCategory category) {
  switch (category) {
    case MetricCategory::accuracy:
      return "accuracy";
    case MetricCategory::throughput:
      return "throughput";
    case MetricCategory::latency:
      return "latency";
    case MetricCategory::energy:
      return "energy";
    case MetricCategory::time:
      return "time";
    case MetricCategory::size:
      return "size";
    case MetricCategory::errors:
      return "errors";
  }
  return "?";
}

std::optional<MetricCategory> parse_category(const std::string& name) {
  for (const MetricCategory category :
       {MetricCategory::accuracy, MetricCategory::throughput, MetricCategory::latency, MetricCategory::energy,
        MetricCategory::time, MetricCategory::size, MetricCategory::errors})
    if (name == category_name(category)) return category;
  return std::nullopt;
}

}  // namespace ipj::report
