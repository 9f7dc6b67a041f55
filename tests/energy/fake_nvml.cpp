// A fake libnvidia-ml for tests: the NVML functions ipj uses, driven by a state file named in
// $FAKE_NVML_STATE and re-read on every call. Lines: "init_fail 1", "count N", "no_energy 1", "energy_mj I
// V", "power_mw I V", "name I TEXT", power limits "limit_mw I V" (default 300000; the last line wins),
// "default_limit_mw I V" (300000), "limit_range_mw I MIN MAX" (100000 400000), "set_fail 1" (setting the
// limit answers "Insufficient Permissions"). nvmlDeviceSetPowerManagementLimit appends "limit_mw I V" to the
// state file, so that tests read the limit's history. Exported with C linkage like the real library.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

namespace {

struct State {
  bool init_fail = false;
  bool no_energy = false;
  unsigned count = 1;
  std::map<unsigned, unsigned long long> energy_mj;
  std::map<unsigned, unsigned> power_mw;
  std::map<unsigned, std::string> names;
  std::map<unsigned, unsigned> limit_mw, default_limit_mw, limit_min_mw, limit_max_mw;
  bool set_fail = false;
};

State read_state() {
  State state;
  const char* path = std::getenv("FAKE_NVML_STATE");
  if (path == nullptr) return state;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    fields >> key;
    unsigned index = 0;
    if (key == "init_fail") fields >> state.init_fail;
    if (key == "no_energy") fields >> state.no_energy;
    if (key == "count") fields >> state.count;
    if (key == "energy_mj") fields >> index >> state.energy_mj[index];
    if (key == "power_mw") fields >> index >> state.power_mw[index];
    if (key == "limit_mw") fields >> index >> state.limit_mw[index];
    if (key == "default_limit_mw") fields >> index >> state.default_limit_mw[index];
    if (key == "limit_range_mw") fields >> index >> state.limit_min_mw[index] >> state.limit_max_mw[index];
    if (key == "set_fail") fields >> state.set_fail;
    if (key == "name") {
      fields >> index;
      std::getline(fields >> std::ws, state.names[index]);
    }
  }
  return state;
}

constexpr int kSuccess = 0, kNotSupported = 3, kInvalidArgument = 2, kNoPermission = 4, kDriverNotLoaded = 9;

unsigned value_or(const std::map<unsigned, unsigned>& values, unsigned index, unsigned fallback) {
  return values.count(index) ? values.at(index) : fallback;
}

}  // namespace

extern "C" {
struct nvmlDevice_st;
int nvmlInit_v2() {
  return read_state().init_fail ? kDriverNotLoaded : kSuccess;
}
int nvmlShutdown() {
  return kSuccess;
}
const char* nvmlErrorString(int code) {
  if (code == kNoPermission) return "Insufficient Permissions";
  return code == kDriverNotLoaded ? "Driver Not Loaded" : "fake NVML error";
}
int nvmlDeviceGetCount_v2(unsigned* count) {
  *count = read_state().count;
  return kSuccess;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_st** device) {
  if (index >= read_state().count) return kInvalidArgument;
  *device = reinterpret_cast<nvmlDevice_st*>(static_cast<std::uintptr_t>(index + 1));
  return kSuccess;
}
int nvmlDeviceGetName(nvmlDevice_st* device, char* name, unsigned length) {
  const unsigned index = static_cast<unsigned>(reinterpret_cast<std::uintptr_t>(device)) - 1;
  const State state = read_state();
  const std::string text =
      state.names.count(index) ? state.names.at(index) : "Fake GPU " + std::to_string(index);
  std::snprintf(name, length, "%s", text.c_str());
  return kSuccess;
}
int nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_st* device, unsigned long long* millijoules) {
  const State state = read_state();
  if (state.no_energy) return kNotSupported;
  const unsigned index = static_cast<unsigned>(reinterpret_cast<std::uintptr_t>(device)) - 1;
  *millijoules = state.energy_mj.count(index) ? state.energy_mj.at(index) : 0;
  return kSuccess;
}
int nvmlDeviceGetPowerUsage(nvmlDevice_st* device, unsigned* milliwatts) {
  const State state = read_state();
  const unsigned index = static_cast<unsigned>(reinterpret_cast<std::uintptr_t>(device)) - 1;
  *milliwatts = state.power_mw.count(index) ? state.power_mw.at(index) : 0;
  return kSuccess;
}
int nvmlDeviceGetIndex(nvmlDevice_st* device, unsigned* index) {
  *index = static_cast<unsigned>(reinterpret_cast<std::uintptr_t>(device)) - 1;
  return kSuccess;
}
int nvmlDeviceGetPowerManagementLimit(nvmlDevice_st* device, unsigned* milliwatts) {
  const unsigned index = static_cast<unsigned>(reinterpret_cast<std::uintptr_t>(device)) - 1;
  *milliwatts = value_or(read_state().limit_mw, index, 300000);
  return kSuccess;
}
int nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_st* device, unsigned* milliwatts) {
  const unsigned index = static_cast<unsigned>(reinterpret_cast<std::uintptr_t>(device)) - 1;
  *milliwatts = value_or(read_state().default_limit_mw, index, 300000);
  return kSuccess;
}
int nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_st* device, unsigned* min_mw, unsigned* max_mw) {
  const unsigned index = static_cast<unsigned>(reinterpret_cast<std::uintptr_t>(device)) - 1;
  const State state = read_state();
  *min_mw = value_or(state.limit_min_mw, index, 100000);
  *max_mw = value_or(state.limit_max_mw, index, 400000);
  return kSuccess;
}
int nvmlDeviceSetPowerManagementLimit(nvmlDevice_st* device, unsigned milliwatts) {
  const unsigned index = static_cast<unsigned>(reinterpret_cast<std::uintptr_t>(device)) - 1;
  const State state = read_state();
  if (state.set_fail) return kNoPermission;
  if (milliwatts < value_or(state.limit_min_mw, index, 100000) ||
      milliwatts > value_or(state.limit_max_mw, index, 400000))
    return kInvalidArgument;
  std::ofstream out(std::getenv("FAKE_NVML_STATE"), std::ios::app);
  out << "limit_mw " << index << " " << milliwatts << "\n";
  return out.flush() ? kSuccess : kNotSupported;
}
}
