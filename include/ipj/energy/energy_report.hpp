// Derived energy figures for reports: kWh, CO2 and cost from grid intensity and price, accuracy per kJ.
#pragma once

#include <optional>
#include <vector>

#include "ipj/core/json_io.hpp"
#include "ipj/energy/measurement.hpp"
#include "ipj/energy/meter.hpp"

namespace ipj::energy {

inline constexpr double kJoulesPerKwh = 3.6e6;

struct Tariff {
  std::optional<double> grid_g_per_kwh;  // gCO2e per kWh
  std::optional<double> usd_per_kwh;
};

// Adds kwh, and co2_g / cost_usd when the tariff has them, to a measurement's JSON.
Json with_costs(const Measurement& measurement, const Tariff& tariff);

// [{"name", "available", "reason"}, ...]: which meters a report's energy comes from, and why others are not.
Json to_json(const std::vector<MeterStatus>& meters);

// Accuracy (0..1) per kilojoule; 0 when no energy was measured.
double accuracy_per_kj(double accuracy, double joules);

}  // namespace ipj::energy
