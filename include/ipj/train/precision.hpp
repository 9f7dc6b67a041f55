// Training precision: resolving fp32 | bf16 | fp16 | auto against the hardware, and the autocast region used
// for forward passes (CPU bf16 through LibTorch's autocast; CUDA fp16/bf16 in IPJ_WITH_CUDA builds).
#pragma once

#include <string>

namespace ipj::train {

struct PrecisionChoice {
  std::string precision;  // fp32 | bf16 | fp16
  std::string reason;     // why, e.g. "auto: bf16 is native on this CPU (AVX512_BF16)"
};

// `requested` is fp32, bf16, fp16 or auto. `cpu_bf16_native`: AVX512_BF16 or AMX-BF16 present.
// Throws ipj::Error(unsupported) for fp16 on the CPU (LibTorch's CPU autocast is bf16-only).
PrecisionChoice resolve_precision(const std::string& requested, bool cpu_bf16_native);
// The same, probing this machine's CPU.
PrecisionChoice resolve_precision_here(const std::string& requested);

// Enables autocast for `precision` on the CPU for the guard's lifetime (no-op for fp32); restores the
// previous state and clears autocast's weight cache on exit. Forward passes run inside, backward passes
// outside.
class AutocastRegion {
 public:
  explicit AutocastRegion(const std::string& precision);
  ~AutocastRegion();
  AutocastRegion(const AutocastRegion&) = delete;
  AutocastRegion& operator=(const AutocastRegion&) = delete;

 private:
  bool active_ = false;
  bool previous_ = false;
};

}  // namespace ipj::train
