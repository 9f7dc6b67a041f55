// The energy source this machine's meters give a measurement, for tests that must pass with and without
// RAPL/NVML: the same discovery the library does (environment overrides included), no hard-coded label.
#include "ipj/energy/meter.hpp"
#include "support/test_support.hpp"

namespace ipj::testing {

std::string machine_energy_source(int local_rank, int local_world_size) {
  const energy::MeterSet set = energy::discover_meters_for_rank({}, local_rank, local_world_size);
  bool any_channel = false, any_in_total = false;
  energy::EnergySource source = energy::EnergySource::estimated;  // a Measurement's default
  for (const auto& meter : set.meters)
    for (const energy::Channel& channel : meter->channels()) {
      any_channel = true;
      if (!channel.in_total) continue;
      source = any_in_total ? energy::weakest(source, channel.source) : channel.source;
      any_in_total = true;
    }
  return any_channel ? energy::source_name(source) : "none";
}

}  // namespace ipj::testing
