// NVML through dlopen (no link-time dependency; the few functions used are declared in nvml_api.hpp, as
// pynvml does). Per GPU: the total-energy counter (mJ, Volta+) when it works, else power (instantaneous
// field, or the averaged power reading) integrated with the trapezoid rule. Honours CUDA_VISIBLE_DEVICES
// (indices or GPU-UUIDs).
#include <dlfcn.h>

#include <cstdlib>
#include <sstream>

#include "ipj/energy/meter.hpp"
#include "nvml_api.hpp"

namespace ipj::energy {
namespace {

constexpr unsigned kFieldPowerInstant = 186;  // NVML_FI_DEV_POWER_INSTANT (mW)

struct Gpu {
  NvmlDevice device = nullptr;
  bool use_counter = false;
  double counter_start_mj = 0.0;
  double last_power_w = -1.0;
  double last_time_s = 0.0;
  double integrated_j = 0.0;
};

class NvmlMeter : public Meter {
 public:
  NvmlMeter(NvmlApi api, std::vector<Gpu> gpus, std::vector<Channel> channels)
      : api_(api), gpus_(std::move(gpus)), channels_(std::move(channels)) {}
  ~NvmlMeter() override {
    if (api_.shutdown) api_.shutdown();
    ::dlclose(api_.handle);
  }
  std::string name() const override { return "nvml"; }
  const std::vector<Channel>& channels() const override { return channels_; }
  double max_sample_interval_s() const override { return 0.1; }  // power integration needs <= 100 ms samples

  std::vector<double> sample(double now_s) override {
    std::vector<double> joules;
    for (auto& gpu : gpus_) {
      if (gpu.use_counter) {
        unsigned long long millijoules = 0;
        if (api_.total_energy(gpu.device, &millijoules) == kNvmlSuccess)
          gpu.integrated_j = (static_cast<double>(millijoules) - gpu.counter_start_mj) / 1e3;
      } else {
        const double power_w = read_power_w(gpu.device);
        if (power_w >= 0.0) {
          if (gpu.last_power_w >= 0.0)
            gpu.integrated_j += 0.5 * (power_w + gpu.last_power_w) * (now_s - gpu.last_time_s);
          gpu.last_power_w = power_w;
          gpu.last_time_s = now_s;
        }
      }
      joules.push_back(gpu.integrated_j);
    }
    return joules;
  }

  double read_power_w(NvmlDevice device) const {
    if (api_.field_values) {
      NvmlFieldValue field{};
      field.field_id = kFieldPowerInstant;
      if (api_.field_values(device, 1, &field) == kNvmlSuccess && field.status == kNvmlSuccess)
        return field.value.as_uint / 1e3;
    }
    unsigned milliwatts = 0;
    if (api_.power_usage && api_.power_usage(device, &milliwatts) == kNvmlSuccess) return milliwatts / 1e3;
    return -1.0;
  }

 private:
  NvmlApi api_;
  std::vector<Gpu> gpus_;
  std::vector<Channel> channels_;
};

}  // namespace

std::vector<NvmlDevice> visible_devices(const NvmlApi& api, unsigned count) {
  std::vector<NvmlDevice> devices;
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible == nullptr) {
    for (unsigned index = 0; index < count; ++index) {
      NvmlDevice device = nullptr;
      if (api.handle_by_index(index, &device) == kNvmlSuccess) devices.push_back(device);
    }
    return devices;
  }
  std::stringstream list(visible);
  std::string token;
  while (std::getline(list, token, ',')) {
    NvmlDevice device = nullptr;
    char* end = nullptr;
    const long index = std::strtol(token.c_str(), &end, 10);
    if (!token.empty() && *end == '\0') {
      if (index < 0 || static_cast<unsigned>(index) >= count ||
          api.handle_by_index(index, &device) != kNvmlSuccess)
        break;
    } else if (token.rfind("GPU-", 0) == 0 && api.handle_by_uuid) {
      if (api.handle_by_uuid(token.c_str(), &device) != kNvmlSuccess) break;
    } else {
      break;
    }
    devices.push_back(device);
  }
  return devices;
}

namespace {

template <typename Function>
void bind(void* handle, const char* symbol, Function& function) {
  function = reinterpret_cast<Function>(::dlsym(handle, symbol));
}

}  // namespace

NvmlApi load_nvml(const std::string& library_path, std::string& reason) {
  NvmlApi api;
  api.handle = ::dlopen(library_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (api.handle == nullptr) {
    reason = "cannot load " + library_path + " (no NVIDIA driver here): " + ::dlerror();
    return api;
  }
  bind(api.handle, "nvmlInit_v2", api.init);
  bind(api.handle, "nvmlShutdown", api.shutdown);
  bind(api.handle, "nvmlErrorString", api.error_string);
  bind(api.handle, "nvmlDeviceGetCount_v2", api.device_count);
  bind(api.handle, "nvmlDeviceGetHandleByIndex_v2", api.handle_by_index);
  bind(api.handle, "nvmlDeviceGetHandleByUUID", api.handle_by_uuid);
  bind(api.handle, "nvmlDeviceGetName", api.device_name);
  bind(api.handle, "nvmlDeviceGetIndex", api.device_index);
  bind(api.handle, "nvmlDeviceGetTotalEnergyConsumption", api.total_energy);
  bind(api.handle, "nvmlDeviceGetPowerUsage", api.power_usage);
  bind(api.handle, "nvmlDeviceGetFieldValues", api.field_values);
  bind(api.handle, "nvmlDeviceGetPowerManagementLimit", api.power_limit);
  bind(api.handle, "nvmlDeviceGetPowerManagementDefaultLimit", api.default_power_limit);
  bind(api.handle, "nvmlDeviceGetPowerManagementLimitConstraints", api.power_limit_constraints);
  bind(api.handle, "nvmlDeviceSetPowerManagementLimit", api.set_power_limit);
  return api;
}

void close_nvml(NvmlApi& api, bool initialised) {
  if (api.handle == nullptr) return;
  if (initialised && api.shutdown) api.shutdown();
  ::dlclose(api.handle);
  api.handle = nullptr;
}

std::unique_ptr<Meter> open_nvml_meter(const std::string& library_path, std::string& reason) {
  NvmlApi api = load_nvml(library_path, reason);
  if (api.handle == nullptr) return nullptr;
  if (!api.init || !api.device_count || !api.handle_by_index || !api.device_name) {
    reason = library_path + " lacks the NVML functions ipj needs (nvmlInit_v2, nvmlDeviceGetCount_v2, ...)";
    ::dlclose(api.handle);
    return nullptr;
  }
  if (const NvmlReturn status = api.init(); status != kNvmlSuccess) {
    reason = "nvmlInit failed: " + api.describe(status);
    ::dlclose(api.handle);
    return nullptr;
  }
  unsigned count = 0;
  api.device_count(&count);
  std::vector<Gpu> gpus;
  std::vector<Channel> channels;
  int visible_index = 0;
  for (NvmlDevice device : visible_devices(api, count)) {
    Gpu gpu;
    gpu.device = device;
    unsigned long long millijoules = 0;
    gpu.use_counter = api.total_energy && api.total_energy(device, &millijoules) == kNvmlSuccess;
    gpu.counter_start_mj = static_cast<double>(millijoules);
    char name[96] = "GPU";
    api.device_name(device, name, sizeof name);
    Channel channel;
    channel.name = "gpu" + std::to_string(visible_index++) + " (" + name + ")";
    channel.kind = "gpu";
    channel.source = gpu.use_counter ? EnergySource::counter : EnergySource::integrated;
    gpus.push_back(gpu);
    channels.push_back(channel);
  }
  if (gpus.empty()) {
    reason = count == 0 ? "NVML reports no GPUs" : "CUDA_VISIBLE_DEVICES hides every GPU";
    api.shutdown();
    ::dlclose(api.handle);
    return nullptr;
  }
  auto meter = std::make_unique<NvmlMeter>(api, std::move(gpus), std::move(channels));
  return meter;
}

}  // namespace ipj::energy
