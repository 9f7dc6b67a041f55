// The CPU energy estimate used where no sensor exists: CPU seconds x (TDP / logical CPUs) for active work,
// plus an idle share (idle_fraction x TDP) for the wall time. Always labelled `estimated`, with its model and
// inputs.
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "ipj/core/environment.hpp"
#include "ipj/energy/meter.hpp"

namespace ipj::energy {
namespace {

constexpr double kDefaultWattsPerCpu =
    10.0;  // stated default: ~10 W per logical CPU of a server package at load

class CpuEstimateMeter : public Meter {
 public:
  CpuEstimateMeter(double tdp_w, int cpus, double idle_fraction, std::function<double()> cpu_seconds)
      : tdp_w_(tdp_w), cpus_(cpus), idle_fraction_(idle_fraction), cpu_seconds_(std::move(cpu_seconds)) {
    start_cpu_s_ = cpu_seconds_();
    char model[200];
    std::snprintf(
        model, sizeof model,
        "estimate: cpu_seconds x %.2f W/CPU (TDP %.1f W / %d CPUs) + %.0f%% idle share of TDP x wall_s",
        tdp_w_ / cpus_, tdp_w_, cpus_, idle_fraction_ * 100.0);
    channels_.push_back(Channel{"cpu (estimate)", "cpu", EnergySource::estimated, true, model});
  }
  std::string name() const override { return "estimate"; }
  const std::vector<Channel>& channels() const override { return channels_; }
  std::vector<double> sample(double now_s) override {
    if (!started_) {
      start_time_s_ = now_s;
      started_ = true;
    }
    const double active_j = (cpu_seconds_() - start_cpu_s_) * tdp_w_ / cpus_;
    const double idle_j = (now_s - start_time_s_) * idle_fraction_ * tdp_w_;
    return {active_j + idle_j};
  }

 private:
  double tdp_w_;
  int cpus_;
  double idle_fraction_;
  std::function<double()> cpu_seconds_;
  double start_cpu_s_ = 0.0;
  double start_time_s_ = 0.0;
  bool started_ = false;
  std::vector<Channel> channels_;
};

}  // namespace

double process_cpu_seconds() {
  timespec now{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) / 1e9;
}

std::unique_ptr<Meter> make_cpu_estimate_meter(const MeterOptions& options) {
  const int cpus = std::max(1, static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)));
  double tdp_w = options.cpu_tdp_w;
  if (tdp_w <= 0.0) {
    tdp_w = environment_number("IPJ_CPU_TDP_W").value_or(0.0);
  }
  if (tdp_w <= 0.0) tdp_w = kDefaultWattsPerCpu * cpus;
  auto cpu_seconds = options.cpu_seconds ? options.cpu_seconds : std::function<double()>(process_cpu_seconds);
  return std::make_unique<CpuEstimateMeter>(tdp_w, cpus, options.idle_fraction, cpu_seconds);
}

namespace {

// An explicit setting wins, then the environment variable, then the default.
std::string setting(const std::string& explicit_value, const char* environment_variable,
                    const char* fallback) {
  if (!explicit_value.empty()) return explicit_value;
  const char* from_environment = std::getenv(environment_variable);
  return from_environment ? from_environment : fallback;
}

// Adds the meter (or the reason it is missing) to the set; returns the added meter or nullptr.
const Meter* add_meter(MeterSet& set, const std::string& name, const std::string& location,
                       std::unique_ptr<Meter> meter, const std::string& reason) {
  if (!meter) {
    set.status.push_back({name, false, reason});
    return nullptr;
  }
  set.status.push_back({name, true, location});
  set.meters.push_back(std::move(meter));
  return set.meters.back().get();
}

}  // namespace

MeterSet discover_meters(const MeterOptions& options) {
  MeterSet set;
  bool cpu_measured = false;
  std::string reason;
  if (options.use_rapl) {
    const std::string root = setting(options.powercap_root, "IPJ_POWERCAP_ROOT", "/sys/class/powercap");
    if (const Meter* rapl = add_meter(set, "rapl", root, open_rapl_meter(root, reason), reason)) {
      for (const auto& channel : rapl->channels())
        cpu_measured = cpu_measured || channel.kind == "cpu" || channel.kind == "psys";
    }
  }
  if (options.use_nvml) {
    const std::string library = setting(options.nvml_library, "IPJ_NVML_LIBRARY", "libnvidia-ml.so.1");
    add_meter(set, "nvml", library, open_nvml_meter(library, reason), reason);
  }
  if (!cpu_measured) {
    auto meter = make_cpu_estimate_meter(options);
    const std::string description = "no CPU energy sensor: " + meter->channels()[0].model;
    add_meter(set, "estimate", description, std::move(meter), "");
  }
  return set;
}

}  // namespace ipj::energy
