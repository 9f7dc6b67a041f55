// kWh / CO2 / cost arithmetic.
#include "ipj/energy/energy_report.hpp"

namespace ipj::energy {

Json with_costs(const Measurement& measurement, const Tariff& tariff) {
  Json json = to_json(measurement);
  const double kwh = measurement.energy_j / kJoulesPerKwh;
  json["kwh"] = kwh;
  if (tariff.grid_g_per_kwh) json["co2_g"] = kwh * *tariff.grid_g_per_kwh;
  if (tariff.usd_per_kwh) json["cost_usd"] = kwh * *tariff.usd_per_kwh;
  return json;
}

Json to_json(const std::vector<MeterStatus>& meters) {
  Json list = Json::array();
  for (const auto& meter : meters)
    list.push_back({{"name", meter.name}, {"available", meter.available}, {"reason", meter.reason}});
  return list;
}

double accuracy_per_kj(double accuracy, double joules) {
  return joules > 0.0 ? accuracy / (joules / 1e3) : 0.0;
}

}  // namespace ipj::energy
