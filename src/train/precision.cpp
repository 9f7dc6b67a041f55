// Precision resolution and the CPU autocast region.
#include "ipj/train/precision.hpp"

#include "ipj/core/error.hpp"
#include "ipj/core/torch_compat.hpp"
#include "ipj/device/cpu_info.hpp"

namespace ipj::train {

PrecisionChoice resolve_precision(const std::string& requested, bool cpu_bf16_native) {
  if (requested == "fp32") return {"fp32", "requested fp32"};
  if (requested == "bf16") {
    return {"bf16", cpu_bf16_native
                        ? "requested bf16 (native on this CPU)"
                        : "requested bf16 (emulated: this CPU has no AVX512_BF16/AMX, expect it slower)"};
  }
  if (requested == "fp16") {
    fail(ErrorCategory::unsupported,
         "--precision fp16 needs a CUDA device: LibTorch's CPU autocast supports bf16 only; use --precision "
         "bf16 "
         "(or auto)");
  }
  if (requested == "auto") {
    if (cpu_bf16_native) return {"bf16", "auto: bf16 is native on this CPU (AVX512_BF16 or AMX-BF16)"};
    return {"fp32", "auto: no native bf16 on this CPU (needs AVX512_BF16 or AMX), fp32 is fastest"};
  }
  fail(ErrorCategory::usage, "--precision must be fp32, bf16, fp16 or auto, got '" + requested + "'");
}

PrecisionChoice resolve_precision_here(const std::string& requested) {
  const device::CpuInfo cpu = device::probe_cpu();
  return resolve_precision(requested, cpu.has("avx512_bf16") || cpu.has("amx_bf16"));
}

AutocastRegion::AutocastRegion(const std::string& precision) {
  if (precision != "bf16") return;
  previous_ = compat::cpu_autocast_enabled();
  compat::set_cpu_autocast(true, at::kBFloat16);
  active_ = true;
}

AutocastRegion::~AutocastRegion() {
  if (!active_) return;
  compat::set_cpu_autocast(previous_, at::kBFloat16);
  if (!previous_) compat::clear_autocast_cache();
}

}  // namespace ipj::train
