// The GPU power limit (`ipj tune --allow-power-limit`), through NVML (dlopen, as the energy meter). Safety:
// the original limit is written to a restore file before any change and put back when the control is
// destroyed (normal exit, exceptions) and on SIGINT, SIGTERM and SIGHUP (a watcher thread restores, then
// the signal takes its default course). SIGKILL cannot be caught: the next run restores from the file.
// LibTorch-free.
#pragma once

#include <memory>
#include <string>

namespace ipj::energy {

struct GpuPowerLimits {
  unsigned nvml_index = 0;
  std::string name;
  double original_w = 0.0;  // the limit before ipj touched it
  double default_w = 0.0;   // the board's default limit (fractions refer to it)
  double min_w = 0.0;
  double max_w = 0.0;
};

class PowerLimitControl {
 public:
  // Opens NVML (`library` "" = $IPJ_NVML_LIBRARY or libnvidia-ml.so.1) for the GPU of `device` ("cuda",
  // "cuda:N"; CUDA_VISIBLE_DEVICES honoured), writes `restore_file` and installs the signal watcher.
  // Throws ipj::Error(unsupported) when NVML, the GPU or its limits are not available.
  PowerLimitControl(const std::string& library, const std::string& device, const std::string& restore_file);
  ~PowerLimitControl();
  PowerLimitControl(const PowerLimitControl&) = delete;
  PowerLimitControl& operator=(const PowerLimitControl&) = delete;

  // Sets the limit to `fraction` of the default limit, clamped to the board's range; returns the watts set.
  // Throws ipj::Error(unsupported) when NVML refuses (e.g. not root: "Insufficient Permissions").
  double set_fraction(double fraction);
  // Puts the original limit back (idempotent) and removes the restore file.
  void restore();
  const GpuPowerLimits& limits() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

// A restore file left by a run that was killed while it had changed the limit: puts that limit back and
// removes the file. Returns what it did ("" when there was no file). Throws ipj::Error(unsupported) when
// NVML refuses.
std::string restore_power_limit_from_file(const std::string& library, const std::string& restore_file);

// What the restore file says, for a warning when --allow-power-limit is not given ("" when there is none).
std::string describe_restore_file(const std::string& restore_file);

}  // namespace ipj::energy
