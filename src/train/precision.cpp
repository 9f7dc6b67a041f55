// Precision resolution and the CPU autocast region.
#include "ipj/train/precision.hpp"

#include "ipj/core/error.hpp"
#include "ipj/core/torch_compat.hpp"
#include "ipj/device/cpu_info.hpp"
#include "ipj/device/torch_info.hpp"

#include <cstdlib>

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

PrecisionChoice resolve_precision_here(const std::string& requested, const std::string& device_name) {
  if (device_name == "cpu") {
    const device::CpuInfo cpu = device::probe_cpu();
    return resolve_precision(requested, cpu.has("avx512_bf16") || cpu.has("amx_bf16"));
  }
  const int index = device_name == "cuda" ? 0 : std::atoi(device_name.c_str() + 5);  // "cuda:N"
  const device::TorchInfo torch_info = device::probe_torch();
  const device::CudaDeviceInfo* gpu = nullptr;
  for (const auto& candidate : torch_info.cuda_devices)
    if (candidate.index == index) gpu = &candidate;
  if (gpu == nullptr) {
    fail(ErrorCategory::unsupported,
         "--device " + device_name + " is not usable here: " +
             (torch_info.cuda_built
                  ? "no such CUDA device is visible (see ipj devices)"
                  : "this ipj build has no CUDA support (rebuild with -DIPJ_WITH_CUDA=ON against a "
                    "CUDA LibTorch)"));
  }
  const std::string sm = "sm_" + std::to_string(gpu->compute_major) + std::to_string(gpu->compute_minor);
  if (requested == "fp32") return {"fp32", "requested fp32"};
  if (requested == "fp16") return {"fp16", "requested fp16 on " + gpu->name + " (" + sm + ")"};
  if (requested == "bf16") {
    return {"bf16", gpu->bf16_native ? "requested bf16 (native on " + sm + ")"
                                     : "requested bf16 (emulated before sm_80, expect it slower)"};
  }
  if (requested == "auto") {
    return gpu->bf16_native
               ? PrecisionChoice{"bf16", "auto: bf16 is native on " + gpu->name + " (" + sm + ")"}
               : PrecisionChoice{"fp16", "auto: fp16 tensor cores on " + sm + " (bf16 needs sm_80+)"};
  }
  fail(ErrorCategory::usage, "--precision must be fp32, bf16, fp16 or auto, got '" + requested + "'");
}

AutocastRegion::AutocastRegion(const std::string& precision, bool cuda) : cuda_(cuda) {
  if (precision != "bf16" && precision != "fp16") return;
  const at::ScalarType dtype = precision == "bf16" ? at::kBFloat16 : at::kHalf;
  dtype_ = dtype;
  previous_ = cuda_ ? compat::cuda_autocast_enabled() : compat::cpu_autocast_enabled();
  if (cuda_) {
    compat::set_cuda_autocast(true, dtype);
  } else {
    compat::set_cpu_autocast(true, dtype);
  }
  active_ = true;
}

AutocastRegion::~AutocastRegion() {
  if (!active_) return;
  if (cuda_) {
    compat::set_cuda_autocast(previous_, dtype_);
  } else {
    compat::set_cpu_autocast(previous_, dtype_);
  }
  if (!previous_) compat::clear_autocast_cache();
}

}  // namespace ipj::train
