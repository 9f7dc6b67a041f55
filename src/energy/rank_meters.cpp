// Meters for one rank of a data-parallel job: node-wide counters are read once per machine (by local rank 0),
// the CPU estimate once per process, so that summing every rank's joules counts each joule once.
#include "ipj/energy/meter.hpp"

namespace ipj::energy {

MeterSet discover_meters_for_rank(MeterOptions options, int local_rank, int local_world_size) {
  if (local_world_size > 1)
    options.idle_fraction /= local_world_size;  // each rank: its share of the idle draw
  MeterSet set = discover_meters(options);
  if (local_rank == 0) return set;
  MeterSet kept;
  for (auto& meter : set.meters) {
    const std::string name = meter->name();
    if (name != "rapl" && name != "nvml") kept.meters.push_back(std::move(meter));
  }
  for (MeterStatus status : set.status) {
    if (status.available && (status.name == "rapl" || status.name == "nvml")) {
      status.available = false;
      status.reason = "node-wide counter: read by local rank 0 for this machine (" + status.reason + ")";
    }
    kept.status.push_back(std::move(status));
  }
  return kept;
}

}  // namespace ipj::energy
