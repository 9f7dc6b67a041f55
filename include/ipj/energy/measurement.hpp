// Energy results: per-device joules with their source (counter / integrated / estimated), window totals,
// watts. LibTorch-free. Every energy figure ipj prints or writes comes from these types, so it always says
// its source.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ipj/core/json_io.hpp"

namespace ipj::energy {

// How a joule figure was obtained, strongest first.
enum class EnergySource {
  counter,     // a hardware energy counter (RAPL energy_uj, NVML total energy)
  integrated,  // power samples integrated over time (trapezoid rule)
  estimated,   // a model (CPU time x TDP share), no sensor involved
};

const char* source_name(EnergySource source);
// The weakest of two sources: a total is only as good as its weakest part.
EnergySource weakest(EnergySource a, EnergySource b);

// What a run reports when it may have measured no energy at all (--no-energy, no meter, no window):
// std::nullopt = nothing measured, spelt "none" in JSON and text. Strings only at the JSON/CLI edges.
using ReportedSource = std::optional<EnergySource>;
// "none" for std::nullopt, else source_name().
std::string reported_source_name(const ReportedSource& source);
// Parses "counter" | "integrated" | "estimated" | "none" (the spellings results files have always used);
// any other text throws Error(invalid_input) naming the text, `where` (file/field) and the accepted
// spellings: a results file with an unknown source is not silently read as "none".
ReportedSource parse_reported_source(const std::string& text, const std::string& where);
// The weakest of the sources that were measured; std::nullopt only when neither was.
ReportedSource weakest(const ReportedSource& a, const ReportedSource& b);

struct DeviceEnergy {
  std::string name;  // e.g. "package-0", "gpu0 (NVIDIA H200)", "cpu (estimate)"
  std::string kind;  // cpu | dram | psys | gpu
  double energy_j = 0.0;
  EnergySource source = EnergySource::estimated;
  bool in_total = true;  // false for domains contained in another one (e.g. package inside psys)
  double average_w = 0.0;
  double peak_w = 0.0;
  std::string model;  // for estimates: the model and its inputs, e.g. "cpu_s x 10 W/core + 10% idle of 20 W"
};

struct Measurement {
  std::string name;
  double wall_s = 0.0;
  double energy_j = 0.0;                          // sum of devices with in_total
  EnergySource source = EnergySource::estimated;  // weakest source among in_total devices
  double average_w = 0.0;
  double peak_w = 0.0;  // highest total power over one sampling interval inside the window (0 if none)
  std::vector<DeviceEnergy> devices;
  // Meter readings inside the window, both edges included (MLPerf power asks for >= 60 at >= 1 Hz).
  int samples = 0;
};

Json to_json(const Measurement& measurement);
// "12.3 J (estimated)" style human figure.
std::string describe_energy(double joules, EnergySource source);

}  // namespace ipj::energy
