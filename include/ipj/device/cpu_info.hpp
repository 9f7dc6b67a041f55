// What the host CPU is and can do: model, cores, ISA features (via libcpuinfo, AMX/FP16 via CPUID since
// Debian's libcpuinfo predates them), physical memory. Linux/x86-64 first; other ISAs report no x86 features.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ipj::device {

// A cap on the instruction sets oneDNN (LibTorch's CPU bf16 kernels) may use, set in the environment:
// ONEDNN_MAX_CPU_ISA (read first) or DNNL_MAX_CPU_ISA, e.g. "AVX2". oneDNN 2.x ignores values it does not
// know, and so does this.
struct OnednnIsaCap {
  std::string variable;      // "ONEDNN_MAX_CPU_ISA" or "DNNL_MAX_CPU_ISA"
  std::string value;         // as set, e.g. "AVX2"
  bool allows_bf16 = false;  // the cap includes AVX512_CORE_BF16 or AMX (or is "ALL")
  bool allows_vnni = false;  // the cap includes AVX512_CORE_VNNI (int8 without 16-bit saturation)
};

struct CpuInfo {
  std::string model;
  int cores = 0;               // physical cores
  int logical_processors = 0;  // hardware threads
  // Keys: avx2, fma3, avx512f, avx512bw, avx512vl, avx512_vnni, avx512_bf16, avx512_fp16, amx, amx_bf16,
  // amx_int8.
  std::map<std::string, bool> features;
  std::uint64_t memory_bytes = 0;
  std::optional<OnednnIsaCap> onednn_cap;  // set when the environment caps oneDNN's ISA

  bool has(const std::string& feature) const;
};

CpuInfo probe_cpu();

// The cap `value` of `variable` puts on oneDNN, or nullopt for a value oneDNN does not know (it ignores
// those).
std::optional<OnednnIsaCap> parse_onednn_isa_cap(const std::string& variable, const std::string& value);
// The cap this process's environment sets, if any.
std::optional<OnednnIsaCap> onednn_isa_cap_from_environment();

// Memory this process can still allocate without swapping: MemAvailable of /proc/meminfo, lowered to the
// cgroup v2 limit's headroom (memory.max - memory.current) inside a container; physical memory as a fallback.
// For checks before large allocations (a batch that cannot fit is a clear error, not a crash).
std::uint64_t available_memory_bytes();

// Precisions that run on native hardware instructions here (not emulated): always "fp32"; "bf16" with
// AVX512_BF16 or AMX-BF16 unless a oneDNN cap below AVX512_CORE_BF16 keeps LibTorch's bf16 kernels off them;
// "fp16" with AVX512_FP16 (same cap); "int8" with VNNI or AMX-INT8 unless a cap below AVX512_CORE_VNNI keeps
// oneDNN's int8 kernels off them.
std::vector<std::string> native_cpu_precisions(const CpuInfo& cpu);
// VNNI (or AMX-INT8) instructions that LibTorch's oneDNN int8 kernels may use here: without them x86 int8
// kernels sum u8 x s8 pairs in saturating 16 bits (quant/quantized_kernels.hpp).
bool onednn_int8_has_vnni(const CpuInfo& cpu);
// bf16 instructions (AVX512_BF16 or AMX-BF16) that a oneDNN cap below AVX512_CORE_BF16 keeps LibTorch's bf16
// kernels off (then cpu.onednn_cap is set).
bool bf16_held_back_by_onednn_cap(const CpuInfo& cpu);

}  // namespace ipj::device
