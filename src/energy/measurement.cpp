// Energy source names and JSON rendering of measurements.
#include "ipj/energy/measurement.hpp"

#include "ipj/core/error.hpp"
#include "ipj/core/number_format.hpp"

namespace ipj::energy {

const char* source_name(EnergySource source) {
  switch (source) {
    case EnergySource::counter:
      return "counter";
    case EnergySource::integrated:
      return "integrated";
    case EnergySource::estimated:
      return "estimated";
  }
  return "estimated";
}

EnergySource weakest(EnergySource a, EnergySource b) {
  return static_cast<int>(a) > static_cast<int>(b) ? a : b;
}

std::string reported_source_name(const ReportedSource& source) {
  return source ? source_name(*source) : "none";
}

ReportedSource parse_reported_source(const std::string& text, const std::string& where) {
  if (text == "none") return std::nullopt;
  for (const EnergySource source : {EnergySource::counter, EnergySource::integrated, EnergySource::estimated})
    if (text == source_name(source)) return source;
  throw Error(ErrorCategory::invalid_input,
              where + ": energy source '" + text +
                  "' is not one of counter, integrated, estimated, none (fix or regenerate the file)");
}

ReportedSource weakest(const ReportedSource& a, const ReportedSource& b) {
  if (!a) return b;
  if (!b) return a;
  return weakest(*a, *b);
}

Json to_json(const Measurement& measurement) {
  Json devices = Json::array();
  for (const auto& device : measurement.devices) {
    Json entry{{"name", device.name},         {"kind", device.kind},
               {"energy_j", device.energy_j}, {"source", source_name(device.source)},
               {"in_total", device.in_total}, {"average_w", device.average_w},
               {"peak_w", device.peak_w}};
    if (!device.model.empty()) entry["model"] = device.model;
    devices.push_back(entry);
  }
  return Json{{"name", measurement.name},
              {"wall_s", measurement.wall_s},
              {"energy_j", measurement.energy_j},
              {"energy_source", source_name(measurement.source)},
              {"average_w", measurement.average_w},
              {"peak_w", measurement.peak_w},
              {"devices", devices},
              {"samples", measurement.samples},
              {"sample_hz", measurement.wall_s > 0 && measurement.samples > 1
                                ? (measurement.samples - 1) / measurement.wall_s
                                : 0.0}};
}

std::string describe_energy(double joules, EnergySource source) {
  const std::string figure =
      joules >= 1e4 ? format_number("%.2f kJ", joules / 1e3) : format_number("%.1f J", joules);
  return figure + " (" + source_name(source) + ")";
}

}  // namespace ipj::energy
