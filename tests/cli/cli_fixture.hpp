// Shared by the CLI tests: what a report's energy source must be, given the meters it lists.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace ipj::testing {

// The source a report's energy must carry, from the meters it lists (discover_meters): the CPU estimate
// when no CPU sensor was found (it makes the total "estimated"), else NVML's integrated power, else counters.
inline std::string expected_energy_source(const nlohmann::json& meters) {
  bool estimate = false, nvml = false;
  for (const auto& meter : meters) {
    if (!meter["available"].get<bool>()) continue;
    estimate = estimate || meter["name"] == "estimate";
    nvml = nvml || meter["name"] == "nvml";
  }
  return estimate ? "estimated" : nvml ? "integrated" : "counter";
}

}  // namespace ipj::testing
