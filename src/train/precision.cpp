// Precision resolution and the CPU autocast region.
#include "ipj/train/precision.hpp"

#include "ipj/core/error.hpp"
#include "ipj/core/torch_compat.hpp"
#include "ipj/device/cpu_info.hpp"
#include "ipj/device/torch_info.hpp"

#include <algorithm>
#include <cstdlib>

namespace ipj::train {

PrecisionChoice resolve_precision(Precision requested, bool cpu_bf16_native) {
  switch (requested) {
    case Precision::fp32:
      return {Precision::fp32, "requested fp32"};
    case Precision::bf16:
      return {Precision::bf16,
              cpu_bf16_native
                  ? "requested bf16 (native on this CPU)"
                  : "requested bf16 (emulated: this CPU has no AVX512_BF16/AMX, expect it slower)"};
    case Precision::fp16:
      fail(
          ErrorCategory::unsupported,
          "--precision fp16 needs a CUDA device: LibTorch's CPU autocast supports bf16 only; use --precision "
          "bf16 (or auto)");
    case Precision::automatic:
      break;
  }
  if (cpu_bf16_native) return {Precision::bf16, "auto: bf16 is native on this CPU (AVX512_BF16 or AMX-BF16)"};
  return {Precision::fp32, "auto: no native bf16 on this CPU (needs AVX512_BF16 or AMX), fp32 is fastest"};
}

PrecisionChoice resolve_precision_here(Precision requested, const DeviceSpec& device) {
  if (!device.cuda) {
    const device::CpuInfo cpu = device::probe_cpu();
    const auto native = device::native_cpu_precisions(cpu);
    PrecisionChoice choice =
        resolve_precision(requested, std::find(native.begin(), native.end(), "bf16") != native.end());
    if (!device::bf16_held_back_by_onednn_cap(cpu) || requested == Precision::fp32) return choice;
    const std::string cap = "this CPU has bf16 instructions, but " + cpu.onednn_cap->variable + "=" +
                            cpu.onednn_cap->value + " keeps oneDNN (LibTorch's bf16 kernels) off them";
    choice.reason = choice.precision == Precision::fp32
                        ? "auto: fp32 (" + cap + ")"
                        : "requested bf16 (" + cap + ": expect it slow or failing)";
    return choice;
  }
  const int index = device.index < 0 ? 0 : device.index;
  const device::TorchInfo torch_info = device::probe_torch();
  const device::CudaDeviceInfo* gpu = nullptr;
  for (const auto& candidate : torch_info.cuda_devices)
    if (candidate.index == index) gpu = &candidate;
  if (gpu == nullptr) {
    fail(ErrorCategory::unsupported,
         "--device " + device_name(device) + " is not usable here: " +
             (torch_info.cuda_built
                  ? "no such CUDA device is visible (see ipj devices)"
                  : "this ipj build has no CUDA support (rebuild with -DIPJ_WITH_CUDA=ON against a "
                    "CUDA LibTorch)"));
  }
  const std::string sm = "sm_" + std::to_string(gpu->compute_major) + std::to_string(gpu->compute_minor);
  switch (requested) {
    case Precision::fp32:
      return {Precision::fp32, "requested fp32"};
    case Precision::fp16:
      return {Precision::fp16, "requested fp16 on " + gpu->name + " (" + sm + ")"};
    case Precision::bf16:
      return {Precision::bf16, gpu->bf16_native ? "requested bf16 (native on " + sm + ")"
                                                : "requested bf16 (emulated before sm_80, expect it slower)"};
    case Precision::automatic:
      break;
  }
  return gpu->bf16_native
             ? PrecisionChoice{Precision::bf16, "auto: bf16 is native on " + gpu->name + " (" + sm + ")"}
             : PrecisionChoice{Precision::fp16, "auto: fp16 tensor cores on " + sm + " (bf16 needs sm_80+)"};
}

AutocastRegion::AutocastRegion(Precision precision, bool cuda) : cuda_(cuda) {
  if (precision == Precision::automatic)
    fail(ErrorCategory::internal, "AutocastRegion needs a resolved precision (resolve_precision)");
  if (precision == Precision::fp32) return;
  const at::ScalarType dtype = precision == Precision::bf16 ? at::kBFloat16 : at::kHalf;
  dtype_ = dtype;
  previous_ = cuda_ ? compat::cuda_autocast_enabled() : compat::cpu_autocast_enabled();
  if (cuda_) {
    compat::set_cuda_autocast(true, dtype);
  } else {
    compat::set_cpu_autocast(true, dtype);
  }
  active_ = true;
}

AutocastRegion::AutocastRegion(const std::string& precision_name, bool cuda)
    : AutocastRegion(parse_choice<Precision>(precision_name, "precision"), cuda) {}

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
