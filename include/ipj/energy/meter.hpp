// Energy meters: sources of cumulative joules per channel (a channel is one device or domain).
// Implementations: RAPL through powercap sysfs, NVML through dlopen, and a CPU-time estimate where no sensor
// exists.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ipj/energy/measurement.hpp"

namespace ipj::energy {

struct Channel {
  std::string name;
  std::string kind;  // cpu | dram | psys | gpu | cpu-core | uncore
  EnergySource source = EnergySource::counter;
  bool in_total = true;
  std::string model;  // estimates only: the model and its inputs
};

class Meter {
 public:
  virtual ~Meter() = default;
  virtual std::string name() const = 0;  // "rapl", "nvml", "estimate"
  virtual const std::vector<Channel>& channels() const = 0;
  // Reads the hardware at monotonic time `now_s` and returns, per channel, the joules accumulated since the
  // meter was opened. Counters wrap: call at least every `max_sample_interval_s()` so that no two wraps hide
  // in one gap.
  virtual std::vector<double> sample(double now_s) = 0;
  virtual double max_sample_interval_s() const { return 1.0; }
};

// Why a meter is or is not in use (for `ipj devices` and results).
struct MeterStatus {
  std::string name;
  bool available = false;
  std::string reason;
};

struct MeterOptions {
  std::string powercap_root;   // "" = $IPJ_POWERCAP_ROOT or /sys/class/powercap
  std::string nvml_library;    // "" = $IPJ_NVML_LIBRARY or libnvidia-ml.so.1
  double cpu_tdp_w = 0.0;      // estimate: CPU package power at full load; 0 = $IPJ_CPU_TDP_W or 10 W per CPU
  double idle_fraction = 0.1;  // estimate: share of the TDP drawn at idle, charged for the wall time
  // estimate: CPU seconds consumed by what is measured; default: this process (CLOCK_PROCESS_CPUTIME_ID).
  std::function<double()> cpu_seconds;
  bool use_rapl = true;
  bool use_nvml = true;
};

struct MeterSet {
  std::vector<std::unique_ptr<Meter>> meters;
  std::vector<MeterStatus> status;
};

// Probes RAPL and NVML; adds the CPU estimate when no RAPL CPU domain can be read.
MeterSet discover_meters(const MeterOptions& options = {});

// The meters of one rank of a data-parallel job with `local_world_size` ranks on this machine, so that the
// sum over all ranks counts every joule once: node-wide counters (RAPL, NVML: every GPU of the machine) are
// read by local rank 0 only; where no CPU counter exists, each rank estimates its own process (its CPU time,
// and 1/local_world_size of the machine's idle share).
MeterSet discover_meters_for_rank(MeterOptions options, int local_rank, int local_world_size);

// The individual meters (nullptr + reason when unavailable).
std::unique_ptr<Meter> open_rapl_meter(const std::string& powercap_root, std::string& reason);
std::unique_ptr<Meter> open_nvml_meter(const std::string& library_path, std::string& reason);
std::unique_ptr<Meter> make_cpu_estimate_meter(const MeterOptions& options);

// Seconds of CPU time used by this process so far.
double process_cpu_seconds();

}  // namespace ipj::energy
