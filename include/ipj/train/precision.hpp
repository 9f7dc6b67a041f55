// Training precision: resolving fp32 | bf16 | fp16 | auto against the hardware, and the autocast region used
// for forward passes (CPU bf16 through LibTorch's autocast; CUDA fp16/bf16 in IPJ_WITH_CUDA builds).
#pragma once

#include <c10/core/ScalarType.h>

#include <string>

namespace ipj::train {

struct PrecisionChoice {
  std::string precision;  // fp32 | bf16 | fp16
  std::string reason;     // why, e.g. "auto: bf16 is native on this CPU (AVX512_BF16)"
};

// `requested` is fp32, bf16, fp16 or auto. `cpu_bf16_native`: AVX512_BF16 or AMX-BF16 present.
// Throws ipj::Error(unsupported) for fp16 on the CPU (LibTorch's CPU autocast is bf16-only).
PrecisionChoice resolve_precision(const std::string& requested, bool cpu_bf16_native);
// The same for a device ("cpu", "cuda", "cuda:N"), probing this machine: on CUDA, fp16 and bf16 run under
// CUDA autocast and auto picks bf16 on sm_80+ (Ampere and newer), fp16 before. Throws ipj::Error(unsupported)
// when the CUDA device is not usable (a CPU-only build, no GPU visible, index out of range).
PrecisionChoice resolve_precision_here(const std::string& requested, const std::string& device = "cpu");

// Enables autocast for `precision` on the CPU (on CUDA when `cuda`) for the guard's lifetime (no-op for
// fp32); restores the previous state and clears autocast's weight cache on exit. Forward passes run inside,
// backward passes outside.
class AutocastRegion {
 public:
  explicit AutocastRegion(const std::string& precision, bool cuda = false);
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
