// Background sampling and window arithmetic of the EnergyMonitor.
#include "ipj/energy/energy_monitor.hpp"

#include <algorithm>
#include <sstream>
#include <system_error>

#include "ipj/core/error.hpp"
#include "ipj/core/number_format.hpp"

namespace ipj::energy {

EnergyMonitor::EnergyMonitor(MeterSet meters, MonitorOptions options)
    : meters_(std::move(meters.meters)),
      status_(std::move(meters.status)),
      epoch_(std::chrono::steady_clock::now()),
      options_(std::move(options)) {
  double interval_s = std::max(1, options_.interval_ms) / 1000.0;
  for (const auto& meter : meters_) {
    for (const auto& channel : meter->channels())
      channels_.push_back(channel);
    interval_s = std::min(interval_s, meter->max_sample_interval_s());
  }
  interval_ = std::chrono::milliseconds(std::max(1, static_cast<int>(interval_s * 1000.0)));
  {
    std::lock_guard<std::mutex> lock(mutex_);
    origin_ = sample_locked();
    last_ = origin_;
  }
  try {
    sampler_ = std::thread([this] { sampler_loop(); });
  } catch (const std::system_error& error) {  // the system refused a thread (process or memory limit)
    // Degrade, and say so in the meters' status: windows still read every meter at their edges.
    status_.push_back({"sampler", false,
                       std::string("cannot start the background sampling thread (") + error.what() +
                           "): meters are read only when a window begins and ends, so peaks and integrated "
                           "power between those reads are missed"});
  }
}

EnergyMonitor::~EnergyMonitor() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  stop_signal_.notify_all();
  if (sampler_.joinable()) sampler_.join();
}

double EnergyMonitor::now_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_).count();
}

EnergyMonitor::Snapshot EnergyMonitor::sample_locked() {
  Snapshot snapshot;
  snapshot.time_s = now_s();
  for (auto& meter : meters_) {
    const std::vector<double> joules = meter->sample(snapshot.time_s);
    snapshot.joules.insert(snapshot.joules.end(), joules.begin(), joules.end());
  }
  // Power over the interval since the previous sample updates the peaks of every open window.
  const double dt = snapshot.time_s - last_.time_s;
  if (dt > 1e-3 && last_.joules.size() == snapshot.joules.size()) {
    double total_w = 0.0;
    std::vector<double> channel_w(snapshot.joules.size());
    for (size_t index = 0; index < snapshot.joules.size(); ++index) {
      channel_w[index] = (snapshot.joules[index] - last_.joules[index]) / dt;
      if (channels_[index].in_total) total_w += channel_w[index];
    }
    peak_total_w_ = std::max(peak_total_w_, total_w);
    for (auto& [name, window] : windows_) {
      window.peak_total_w = std::max(window.peak_total_w, total_w);
      for (size_t index = 0; index < channel_w.size(); ++index)
        window.peak_w[index] = std::max(window.peak_w[index], channel_w[index]);
    }
  }
  ++samples_since_origin_;
  for (auto& [name, window] : windows_)
    ++window.samples;
  last_ = snapshot;
  return snapshot;
}

void EnergyMonitor::sampler_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    if (stop_signal_.wait_for(lock, interval_, [this] { return stopping_; })) break;
    sample_locked();
  }
}

void EnergyMonitor::begin_window(const std::string& name) {
  if (options_.synchronize) options_.synchronize();
  std::lock_guard<std::mutex> lock(mutex_);
  if (windows_.count(name) != 0) fail(ErrorCategory::usage, "energy window '" + name + "' is already open");
  Window window;
  window.start = sample_locked();
  window.peak_w.assign(channels_.size(), 0.0);
  windows_.emplace(name, std::move(window));
}

Measurement EnergyMonitor::end_window(const std::string& name) {
  if (options_.synchronize) options_.synchronize();
  std::lock_guard<std::mutex> lock(mutex_);
  const Snapshot end = sample_locked();
  auto found = windows_.find(name);
  if (found == windows_.end()) fail(ErrorCategory::usage, "energy window '" + name + "' was never begun");
  Measurement measurement = measure(name, found->second, end);
  windows_.erase(found);
  return measurement;
}

Measurement EnergyMonitor::total() {
  std::lock_guard<std::mutex> lock(mutex_);
  const Snapshot end = sample_locked();
  Window whole;
  whole.start = origin_;
  whole.peak_total_w = peak_total_w_;
  whole.peak_w.assign(channels_.size(), 0.0);
  whole.samples = samples_since_origin_;
  return measure("total", whole, end);
}

Measurement EnergyMonitor::latest() {
  std::lock_guard<std::mutex> lock(mutex_);
  Window whole;
  whole.start = origin_;
  whole.peak_total_w = peak_total_w_;
  whole.peak_w.assign(channels_.size(), 0.0);
  whole.samples = samples_since_origin_;
  return measure("latest", whole, last_.joules.size() == origin_.joules.size() ? last_ : origin_);
}

Measurement EnergyMonitor::measure(const std::string& name, const Window& window, const Snapshot& end) const {
  Measurement measurement;
  measurement.name = name;
  measurement.wall_s = end.time_s - window.start.time_s;
  measurement.samples = window.samples;
  bool any_in_total = false;
  for (size_t index = 0; index < channels_.size(); ++index) {
    const Channel& channel = channels_[index];
    DeviceEnergy device;
    device.name = channel.name;
    device.kind = channel.kind;
    device.source = channel.source;
    device.in_total = channel.in_total;
    device.model = channel.model;
    device.energy_j = end.joules[index] - window.start.joules[index];
    device.average_w = measurement.wall_s > 0 ? device.energy_j / measurement.wall_s : 0.0;
    device.peak_w = std::max(window.peak_w[index], device.average_w);
    if (channel.in_total) {
      measurement.energy_j += device.energy_j;
      measurement.source = any_in_total ? weakest(measurement.source, channel.source) : channel.source;
      any_in_total = true;
    }
    measurement.devices.push_back(device);
  }
  measurement.average_w = measurement.wall_s > 0 ? measurement.energy_j / measurement.wall_s : 0.0;
  measurement.peak_w = std::max(window.peak_total_w, measurement.average_w);
  return measurement;
}

namespace {

// Prometheus label values escape backslash, double quote and newline.
std::string escape_label(const std::string& value) {
  std::string escaped;
  for (char character : value) {
    if (character == '\\' || character == '"') escaped += '\\';
    escaped += character == '\n' ? std::string("\\n") : std::string(1, character);
  }
  return escaped;
}

}  // namespace

std::string EnergyMonitor::prometheus_text() {
  const Measurement since_start = total();
  std::ostringstream out;
  out << "# HELP ipj_energy_joules_total Energy consumed since ipj started, per device, with its source.\n"
      << "# TYPE ipj_energy_joules_total counter\n";
  for (const auto& device : since_start.devices) {
    const std::string value = format_number("%.6f", device.energy_j);
    out << "ipj_energy_joules_total{device=\"" << escape_label(device.name) << "\",kind=\"" << device.kind
        << "\",source=\"" << source_name(device.source) << "\",in_total=\""
        << (device.in_total ? "true" : "false") << "\"} " << value << "\n";
  }
  return out.str();
}

}  // namespace ipj::energy
