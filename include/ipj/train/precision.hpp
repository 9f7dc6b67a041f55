// Training precision: resolving fp32 | bf16 | fp16 | auto against the hardware, and the autocast region used
// for forward passes (CPU bf16 through LibTorch's autocast; CUDA fp16/bf16 in IPJ_WITH_CUDA builds).
#pragma once

#include <c10/core/ScalarType.h>

#include <string>

#include "ipj/train/training_choices.hpp"

namespace ipj::train {

struct PrecisionChoice {
  Precision precision = Precision::fp32;  // fp32 | bf16 | fp16, never automatic
  std::string reason;                     // why, e.g. "auto: bf16 is native on this CPU (AVX512_BF16)"
};

// `cpu_bf16_native`: AVX512_BF16 or AMX-BF16 present. Throws ipj::Error(unsupported) for fp16 on the CPU
// (LibTorch's CPU autocast is bf16-only).
PrecisionChoice resolve_precision(Precision requested, bool cpu_bf16_native);
// The same for a device, probing this machine: on CUDA, fp16 and bf16 run under CUDA autocast and auto picks
// bf16 on sm_80+ (Ampere and newer), fp16 before. Throws ipj::Error(unsupported) when the CUDA device is not
// usable (a CPU-only build, no GPU visible, index out of range).
PrecisionChoice resolve_precision_here(Precision requested, const DeviceSpec& device = {});

// Enables autocast for `precision` on the CPU (on CUDA when `cuda`) for the guard's lifetime (no-op for
// fp32); restores the previous state and clears autocast's weight cache on exit. Forward passes run inside,
// backward passes outside. `precision` must be resolved (not automatic).
class AutocastRegion {
 public:
  explicit AutocastRegion(Precision precision, bool cuda = false);
  // For the inference module's variants, which name their precision ("fp32", "bf16"): parsed here.
  explicit AutocastRegion(const std::string& precision_name, bool cuda = false);
  ~AutocastRegion();
  AutocastRegion(const AutocastRegion&) = delete;
  AutocastRegion& operator=(const AutocastRegion&) = delete;

 private:
  bool active_ = false;
  bool cuda_ = false;
  c10::ScalarType dtype_ = c10::ScalarType::BFloat16;
  bool previous_ = false;
};

}  // namespace ipj::train
