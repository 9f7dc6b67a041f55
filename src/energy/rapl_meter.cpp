// RAPL through the powercap sysfs tree (intel-rapl:N and intel-rapl:N:M zones; AMD exposes the same names).
// Skips intel-rapl-mmio duplicates, never adds a domain to one that contains it, and unwraps energy_uj with
// max_energy_range_uj.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>

#include "ipj/energy/meter.hpp"

namespace ipj::energy {
namespace {
namespace fs = std::filesystem;

struct Zone {
  std::string path;
  std::string name;  // package-0, dram, psys, core, uncore
  int depth = 1;     // 1 for intel-rapl:N, 2 for intel-rapl:N:M
  int fd = -1;
  double max_range_uj = 0.0;
  double last_raw_uj = 0.0;
  double accumulated_uj = 0.0;
};

bool read_text(const std::string& path, std::string& out) {
  std::ifstream in(path);
  if (!in) return false;
  std::getline(in, out);
  return true;
}

bool read_counter(int fd, double& value) {
  char buffer[32];
  const ssize_t got = ::pread(fd, buffer, sizeof buffer - 1, 0);
  if (got <= 0) return false;
  buffer[got] = '\0';
  char* end = nullptr;
  value = std::strtod(buffer, &end);
  return end != buffer;
}

class RaplMeter : public Meter {
 public:
  explicit RaplMeter(std::vector<Zone> zones) : zones_(std::move(zones)) {
    const bool has_psys =
        std::any_of(zones_.begin(), zones_.end(), [](const Zone& z) { return z.name == "psys"; });
    for (const auto& zone : zones_) {
      Channel channel;
      channel.name = zone.name;
      channel.source = EnergySource::counter;
      if (zone.name == "psys") {
        channel.kind = "psys";
      } else if (zone.name.rfind("package", 0) == 0) {
        channel.kind = "cpu";
        channel.in_total = !has_psys;  // psys (platform) contains the packages
      } else if (zone.name == "dram") {
        channel.kind = "dram";
        channel.in_total = !has_psys;
      } else {
        channel.kind = zone.name == "core" ? "cpu-core" : zone.name;
        channel.in_total = false;  // core/uncore are inside their package
      }
      channels_.push_back(channel);
    }
  }
  ~RaplMeter() override {
    for (auto& zone : zones_)
      ::close(zone.fd);
  }
  std::string name() const override { return "rapl"; }
  const std::vector<Channel>& channels() const override { return channels_; }
  // The smallest range at 1 kW: counters cannot wrap twice between samples this close.
  double max_sample_interval_s() const override {
    double smallest = 1e12;
    for (const auto& zone : zones_)
      smallest = std::min(smallest, zone.max_range_uj);
    return std::max(0.05, smallest / 1e6 / 1000.0 / 2.0);
  }
  std::vector<double> sample(double /*now_s*/) override {
    std::vector<double> joules;
    for (auto& zone : zones_) {
      double raw = 0.0;
      if (read_counter(zone.fd, raw)) {
        const double delta =
            raw >= zone.last_raw_uj ? raw - zone.last_raw_uj : raw + zone.max_range_uj - zone.last_raw_uj;
        zone.accumulated_uj += delta;
        zone.last_raw_uj = raw;
      }
      joules.push_back(zone.accumulated_uj / 1e6);
    }
    return joules;
  }

 private:
  std::vector<Zone> zones_;
  std::vector<Channel> channels_;
};

}  // namespace

std::unique_ptr<Meter> open_rapl_meter(const std::string& powercap_root, std::string& reason) {
  std::error_code ec;
  if (!fs::is_directory(powercap_root, ec)) {
    reason = "no powercap tree at " + powercap_root + " (no RAPL driver, or a VM that hides it)";
    return nullptr;
  }
  static const std::regex zone_pattern(R"(intel-rapl:(\d+)(:(\d+))?)");
  std::vector<Zone> zones;
  std::vector<fs::path> entries;
  for (const auto& entry : fs::directory_iterator(powercap_root, ec))
    entries.push_back(entry.path());
  std::sort(entries.begin(), entries.end());
  for (const auto& entry : entries) {
    std::smatch match;
    const std::string file_name = entry.filename().string();
    if (!std::regex_match(file_name, match, zone_pattern)) continue;  // skips intel-rapl-mmio:* duplicates
    Zone zone;
    zone.path = entry.string();
    zone.depth = match[2].matched ? 2 : 1;
    if (!read_text(zone.path + "/name", zone.name)) continue;
    std::string range;
    if (read_text(zone.path + "/max_energy_range_uj", range))
      zone.max_range_uj = std::strtod(range.c_str(), nullptr);
    const std::string counter = zone.path + "/energy_uj";
    zone.fd = ::open(counter.c_str(), O_RDONLY);
    if (zone.fd < 0) {
      const int error = errno;
      for (auto& opened : zones)
        ::close(opened.fd);
      reason = "cannot read " + counter + ": " + std::strerror(error);
      if (error == EACCES || error == EPERM)
        reason +=
            " (RAPL counters are root-only since Linux 5.10: run as root, or grant read access with "
            "`sudo chmod a+r /sys/class/powercap/intel-rapl:*/energy_uj` or a udev rule)";
      return nullptr;
    }
    if (!read_counter(zone.fd, zone.last_raw_uj)) {
      ::close(zone.fd);
      continue;
    }
    zones.push_back(zone);
  }
  if (zones.empty()) {
    reason = "no readable intel-rapl zones under " + powercap_root;
    return nullptr;
  }
  return std::make_unique<RaplMeter>(std::move(zones));
}

}  // namespace ipj::energy
