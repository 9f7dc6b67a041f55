// EnergyMonitor: samples every meter on a background thread (handles counter wraps, integrates power, tracks
// peaks) and measures named windows that may nest or overlap. A window edge reads the meters once (well under
// a millisecond for sysfs/NVML reads) and calls the optional synchronize hook first (GPU work must be
// finished).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ipj/energy/meter.hpp"

namespace ipj::energy {

struct MonitorOptions {
  int interval_ms = 100;              // sampler period; shortened if a meter needs it
  std::function<void()> synchronize;  // e.g. torch::cuda::synchronize; called at window edges
};

class EnergyMonitor {
 public:
  EnergyMonitor(MeterSet meters, MonitorOptions options = {});
  ~EnergyMonitor();
  EnergyMonitor(const EnergyMonitor&) = delete;
  EnergyMonitor& operator=(const EnergyMonitor&) = delete;

  // Starts a window; throws ipj::Error(usage) if one with this name is open.
  void begin_window(const std::string& name);
  // Ends a window and returns what it consumed; throws ipj::Error(usage) for an unknown name.
  Measurement end_window(const std::string& name);
  // Energy since the monitor started, without ending anything.
  Measurement total();
  // Energy since the monitor started up to the most recent sample (the sampler's, or any window edge's):
  // reads no meter, so per-request paths (the server's energy attribution) can call it without paying for
  // file reads.
  Measurement latest();

  const std::vector<MeterStatus>& meter_status() const { return status_; }
  const std::vector<Channel>& channels() const { return channels_; }
  // Prometheus text exposition of cumulative joules per channel since start (ipj_energy_joules_total).
  std::string prometheus_text();

 private:
  struct Snapshot {
    double time_s = 0.0;
    std::vector<double> joules;  // per channel, cumulative
  };
  struct Window {
    Snapshot start;
    double peak_total_w = 0.0;
    std::vector<double> peak_w;  // per channel
    int samples = 1;             // readings since the window began, its first edge included
  };

  double now_s() const;
  Snapshot sample_locked();  // requires mutex_
  void sampler_loop();
  Measurement measure(const std::string& name, const Window& window, const Snapshot& end) const;

  std::vector<std::unique_ptr<Meter>> meters_;
  std::vector<MeterStatus> status_;
  std::vector<Channel> channels_;
  std::chrono::steady_clock::time_point epoch_;
  MonitorOptions options_;
  std::chrono::milliseconds interval_;

  std::mutex mutex_;
  Snapshot origin_;
  Snapshot last_;
  double peak_total_w_ = 0.0;
  int samples_since_origin_ = 1;
  std::map<std::string, Window> windows_;
  std::condition_variable stop_signal_;
  bool stopping_ = false;
  std::thread sampler_;
};

}  // namespace ipj::energy
