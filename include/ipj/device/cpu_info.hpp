// What the host CPU is and can do: model, cores, ISA features (via libcpuinfo, AMX/FP16 via CPUID since
// Debian's libcpuinfo predates them), physical memory. Linux/x86-64 first; other ISAs report no x86 features.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ipj::device {

struct CpuInfo {
  std::string model;
  int cores = 0;               // physical cores
  int logical_processors = 0;  // hardware threads
  // Keys: avx2, fma3, avx512f, avx512bw, avx512vl, avx512_vnni, avx512_bf16, avx512_fp16, amx, amx_bf16,
  // amx_int8.
  std::map<std::string, bool> features;
  std::uint64_t memory_bytes = 0;

  bool has(const std::string& feature) const;
};

CpuInfo probe_cpu();

// Memory this process can still allocate without swapping: MemAvailable of /proc/meminfo, lowered to the
// cgroup v2 limit's headroom (memory.max - memory.current) inside a container; physical memory as a fallback.
// For checks before large allocations (a batch that cannot fit is a clear error, not a crash).
std::uint64_t available_memory_bytes();

// Precisions that run on native hardware instructions here (not emulated): always "fp32"; "bf16" with
// AVX512_BF16 or AMX-BF16; "fp16" with AVX512_FP16; "int8" with VNNI or AMX-INT8.
std::vector<std::string> native_cpu_precisions(const CpuInfo& cpu);

}  // namespace ipj::device
