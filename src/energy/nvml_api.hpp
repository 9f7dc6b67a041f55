// NVML's C API as ipj uses it, private to the energy module: the few functions are declared here (no nvml.h
// on the build machines, as pynvml does) and bound with dlsym from libnvidia-ml at run time, so one binary
// runs with and without a GPU. Used by the energy meter and the power-limit control.
#pragma once

#include <string>
#include <vector>

namespace ipj::energy {

using NvmlReturn = int;
using NvmlDevice = struct NvmlDeviceOpaque*;
inline constexpr NvmlReturn kNvmlSuccess = 0;

struct NvmlFieldValue {  // nvmlFieldValue_t
  unsigned field_id;
  unsigned scope_id;
  long long timestamp;
  long long latency_us;
  int value_type;
  NvmlReturn status;
  union {
    double as_double;
    unsigned as_uint;
    unsigned long as_ulong;
    unsigned long long as_ulonglong;
    long long as_longlong;
  } value;
};

struct NvmlApi {
  void* handle = nullptr;
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;
  NvmlReturn (*device_count)(unsigned*) = nullptr;
  NvmlReturn (*handle_by_index)(unsigned, NvmlDevice*) = nullptr;
  NvmlReturn (*handle_by_uuid)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*device_name)(NvmlDevice, char*, unsigned) = nullptr;
  NvmlReturn (*device_index)(NvmlDevice, unsigned*) = nullptr;
  NvmlReturn (*total_energy)(NvmlDevice, unsigned long long*) = nullptr;
  NvmlReturn (*power_usage)(NvmlDevice, unsigned*) = nullptr;
  NvmlReturn (*field_values)(NvmlDevice, int, NvmlFieldValue*) = nullptr;
  NvmlReturn (*power_limit)(NvmlDevice, unsigned*) = nullptr;                         // mW
  NvmlReturn (*default_power_limit)(NvmlDevice, unsigned*) = nullptr;                 // mW
  NvmlReturn (*power_limit_constraints)(NvmlDevice, unsigned*, unsigned*) = nullptr;  // min, max mW
  NvmlReturn (*set_power_limit)(NvmlDevice, unsigned) = nullptr;                      // mW, needs root

  std::string describe(NvmlReturn code) const {
    return error_string ? std::string(error_string(code)) : "NVML error " + std::to_string(code);
  }
};

// dlopen()s `library_path` and binds every function above (missing ones stay null); does not call init.
// Returns an api with a null handle and `reason` set when the library cannot be loaded.
NvmlApi load_nvml(const std::string& library_path, std::string& reason);
// The GPUs CUDA would show, in CUDA's order: CUDA_VISIBLE_DEVICES entries (indices or GPU-UUIDs) up to the
// first invalid one, else all `count`.
std::vector<NvmlDevice> visible_devices(const NvmlApi& api, unsigned count);
// nvmlShutdown (when initialised) and dlclose; idempotent.
void close_nvml(NvmlApi& api, bool initialised = true);

}  // namespace ipj::energy
