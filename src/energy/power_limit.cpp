// NVML power-limit control with a restore file and a signal watcher thread, on the energy module's NVML
// binding (nvml_api.hpp); the library is optional at run time.
#include "ipj/energy/power_limit.hpp"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <thread>
#include <vector>

#include "ipj/core/error.hpp"
#include "ipj/core/json_io.hpp"
#include "ipj/core/number_format.hpp"
#include "nvml_api.hpp"

namespace ipj::energy {
namespace {

constexpr int kWatchedSignals[] = {SIGINT, SIGTERM, SIGHUP};

std::string library_path(const std::string& library) {
  if (!library.empty()) return library;
  const char* from_environment = std::getenv("IPJ_NVML_LIBRARY");
  return from_environment && *from_environment ? from_environment : "libnvidia-ml.so.1";
}

NvmlApi open_nvml(const std::string& library) {
  const std::string path = library_path(library);
  std::string reason;
  NvmlApi nvml = load_nvml(path, reason);
  if (nvml.handle == nullptr) fail(ErrorCategory::unsupported, "--allow-power-limit needs NVML: " + reason);
  if (!nvml.init || !nvml.device_count || !nvml.handle_by_index || !nvml.power_limit ||
      !nvml.power_limit_constraints || !nvml.set_power_limit) {
    close_nvml(nvml, false);
    fail(ErrorCategory::unsupported,
         path +
             " lacks the NVML power-limit functions "
             "(nvmlDeviceGetPowerManagementLimit, nvmlDeviceSetPowerManagementLimit, ...)");
  }
  if (const NvmlReturn status = nvml.init(); status != kNvmlSuccess) {
    const std::string message = nvml.describe(status);
    close_nvml(nvml, false);
    fail(ErrorCategory::unsupported, "--allow-power-limit: nvmlInit failed: " + message);
  }
  return nvml;
}

// The NVML device behind a CUDA device name ("cuda" = "cuda:0"): the N-th GPU CUDA would show.
NvmlDevice device_for(NvmlApi& nvml, const std::string& device, unsigned& nvml_index) {
  const size_t colon = device.find(':');
  const unsigned cuda_index =
      colon == std::string::npos ? 0u : static_cast<unsigned>(std::stoul(device.substr(colon + 1)));
  unsigned count = 0;
  nvml.device_count(&count);
  const std::vector<NvmlDevice> visible = visible_devices(nvml, count);
  if (cuda_index >= visible.size()) {
    close_nvml(nvml);
    fail(ErrorCategory::unsupported, "--allow-power-limit: NVML shows " + std::to_string(visible.size()) +
                                         " GPU(s) (CUDA_VISIBLE_DEVICES honoured), none for --device " +
                                         device);
  }
  nvml_index = cuda_index;
  if (nvml.device_index) nvml.device_index(visible[cuda_index], &nvml_index);
  return visible[cuda_index];
}

// The one active control, for the signal handler (a process tunes one GPU at a time).
std::atomic<bool> watcher_ready{false};
pthread_t watcher_thread;

void forward_to_watcher(int signal_number) {
  // Runs on whichever thread the kernel picked (one created before the signals were blocked): hand the
  // signal to the watcher, which restores the limit outside signal context. pthread_kill is
  // async-signal-safe.
  if (watcher_ready.load()) pthread_kill(watcher_thread, signal_number);
}

}  // namespace

struct PowerLimitControl::State {
  NvmlApi nvml;
  NvmlDevice device = nullptr;
  GpuPowerLimits limits;
  std::string restore_file;
  std::mutex mutex;
  bool changed = false;
  std::atomic<bool> stop_watcher{false};
  std::thread watcher;
  sigset_t previous_mask;
  struct sigaction previous_actions[3];

  void restore_locked() {
    if (changed && nvml.handle != nullptr) {
      const NvmlReturn status =
          nvml.set_power_limit(device, static_cast<unsigned>(limits.original_w * 1000.0 + 0.5));
      if (status != kNvmlSuccess)
        std::fprintf(
            stderr,
            "ipj: could not restore the GPU power limit to %.0f W (%s): run nvidia-smi -i %u -pl %.0f\n",
            limits.original_w, nvml.describe(status).c_str(), limits.nvml_index, limits.original_w);
      changed = false;
    }
    std::remove(restore_file.c_str());
  }

  void watch() {
    sigset_t signals;
    sigemptyset(&signals);
    for (int signal_number : kWatchedSignals)
      sigaddset(&signals, signal_number);
    while (!stop_watcher.load()) {
      const timespec timeout{0, 100'000'000};
      const int signal_number = sigtimedwait(&signals, nullptr, &timeout);
      if (signal_number <= 0) continue;
      {
        std::lock_guard<std::mutex> lock(mutex);
        restore_locked();
      }
      std::fprintf(stderr, "ipj: signal %d: GPU power limit restored to %.0f W\n", signal_number,
                   limits.original_w);
      struct sigaction default_action {};
      default_action.sa_handler = SIG_DFL;
      sigaction(signal_number, &default_action, nullptr);
      sigset_t only;
      sigemptyset(&only);
      sigaddset(&only, signal_number);
      pthread_sigmask(SIG_UNBLOCK, &only, nullptr);
      raise(signal_number);  // the default action: the process ends as the signal asked
    }
  }
};

PowerLimitControl::PowerLimitControl(const std::string& library, const std::string& device,
                                     const std::string& restore_file)
    : state_(std::make_shared<State>()) {
  State& state = *state_;
  state.nvml = open_nvml(library);
  state.device = device_for(state.nvml, device, state.limits.nvml_index);
  unsigned current_mw = 0, default_mw = 0, min_mw = 0, max_mw = 0;
  if (state.nvml.power_limit(state.device, &current_mw) != kNvmlSuccess ||
      state.nvml.power_limit_constraints(state.device, &min_mw, &max_mw) != kNvmlSuccess) {
    close_nvml(state.nvml);
    fail(ErrorCategory::unsupported,
         "--allow-power-limit: this GPU does not report its power limits through NVML");
  }
  if (!state.nvml.default_power_limit ||
      state.nvml.default_power_limit(state.device, &default_mw) != kNvmlSuccess)
    default_mw = current_mw;
  char name[96] = "GPU";
  if (state.nvml.device_name) state.nvml.device_name(state.device, name, sizeof name);
  state.limits = {state.limits.nvml_index, name,         current_mw / 1e3,
                  default_mw / 1e3,        min_mw / 1e3, max_mw / 1e3};
  state.restore_file = restore_file;
  write_json_file(restore_file, Json{{"schema_version", kResultsSchemaVersion},
                                     {"kind", "power-limit-restore"},
                                     {"nvml_index", state.limits.nvml_index},
                                     {"name", state.limits.name},
                                     {"original_limit_w", state.limits.original_w}});

  // Signals: blocked here (threads started later inherit that) and forwarded by a handler from threads that
  // started earlier, so that only the watcher receives them.
  sigset_t signals;
  sigemptyset(&signals);
  for (int signal_number : kWatchedSignals)
    sigaddset(&signals, signal_number);
  pthread_sigmask(SIG_BLOCK, &signals, &state.previous_mask);
  state.watcher = std::thread([&state] { state.watch(); });
  watcher_thread = state.watcher.native_handle();
  watcher_ready.store(true);
  struct sigaction forward {};
  forward.sa_handler = forward_to_watcher;
  sigemptyset(&forward.sa_mask);
  for (int index = 0; index < 3; ++index)
    sigaction(kWatchedSignals[index], &forward, &state.previous_actions[index]);
}

PowerLimitControl::~PowerLimitControl() {
  State& state = *state_;
  restore();
  state.stop_watcher.store(true);
  if (state.watcher.joinable()) state.watcher.join();
  watcher_ready.store(false);
  for (int index = 0; index < 3; ++index)
    sigaction(kWatchedSignals[index], &state.previous_actions[index], nullptr);
  pthread_sigmask(SIG_SETMASK, &state.previous_mask, nullptr);
  close_nvml(state.nvml);
}

double PowerLimitControl::set_fraction(double fraction) {
  State& state = *state_;
  const double watts = std::clamp(fraction * state.limits.default_w, state.limits.min_w, state.limits.max_w);
  std::lock_guard<std::mutex> lock(state.mutex);
  const NvmlReturn status =
      state.nvml.set_power_limit(state.device, static_cast<unsigned>(watts * 1000.0 + 0.5));
  if (status != kNvmlSuccess)
    fail(ErrorCategory::unsupported, "--allow-power-limit: NVML refused to set the power limit to " +
                                         std::to_string(static_cast<int>(watts)) + " W (" +
                                         state.nvml.describe(status) +
                                         "); changing it needs root (or drop --allow-power-limit)");
  state.changed = true;
  return watts;
}

void PowerLimitControl::restore() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->restore_locked();
}

const GpuPowerLimits& PowerLimitControl::limits() const {
  return state_->limits;
}

std::string describe_restore_file(const std::string& restore_file) {
  if (!std::filesystem::exists(restore_file)) return "";
  const Json saved = read_json_file(restore_file);
  const std::string watts = format_number("%.0f W", saved.value("original_limit_w", 0.0));
  return "GPU " + saved.value("nvml_index", Json(0)).dump() + " (" + saved.value("name", std::string("?")) +
         ") had its power limit changed by a run that was killed; its original limit was " + watts;
}

std::string restore_power_limit_from_file(const std::string& library, const std::string& restore_file) {
  if (!std::filesystem::exists(restore_file)) return "";
  const Json saved = read_json_file(restore_file);
  const unsigned index = saved.value("nvml_index", 0u);
  const double original_w = saved.value("original_limit_w", 0.0);
  NvmlApi nvml = open_nvml(library);
  NvmlDevice device = nullptr;
  NvmlReturn status = nvml.handle_by_index(index, &device);
  if (status == kNvmlSuccess)
    status = nvml.set_power_limit(device, static_cast<unsigned>(original_w * 1000.0 + 0.5));
  const std::string reason = nvml.describe(status);
  close_nvml(nvml);
  if (status != kNvmlSuccess)
    fail(ErrorCategory::unsupported, restore_file + ": cannot restore GPU " + std::to_string(index) + " to " +
                                         std::to_string(static_cast<int>(original_w)) + " W (" + reason +
                                         "); run nvidia-smi -i " + std::to_string(index) + " -pl " +
                                         std::to_string(static_cast<int>(original_w)) + " as root");
  std::remove(restore_file.c_str());
  return "restored GPU " + std::to_string(index) + " to its original power limit of " +
         std::to_string(static_cast<int>(original_w)) + " W (" + restore_file +
         ", left by a run that was killed)";
}

}  // namespace ipj::energy
