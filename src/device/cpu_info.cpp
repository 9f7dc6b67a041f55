// CPU probing through libcpuinfo (+ CPUID leaf 7 for AMX and AVX512-FP16) and sysconf for memory.
#include "ipj/device/cpu_info.hpp"

#include <cpuinfo.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace ipj::device {
namespace {

struct Leaf7Features {
  bool amx_bf16 = false;
  bool amx_tile = false;
  bool amx_int8 = false;
  bool avx512_fp16 = false;
};

Leaf7Features read_leaf7() {
  Leaf7Features result;
#if defined(__x86_64__) || defined(__i386__)
  unsigned int eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
    result.amx_bf16 = (edx >> 22) & 1u;
    result.avx512_fp16 = (edx >> 23) & 1u;
    result.amx_tile = (edx >> 24) & 1u;
    result.amx_int8 = (edx >> 25) & 1u;
  }
#endif
  return result;
}

// The first number in a one-line file such as /sys/fs/cgroup/memory.max; nullopt-like 0 when absent or "max".
std::uint64_t read_number_file(const std::string& path) {
  std::ifstream file(path);
  std::uint64_t value = 0;
  return file >> value ? value : 0;
}

}  // namespace

std::optional<OnednnIsaCap> parse_onednn_isa_cap(const std::string& variable, const std::string& value) {
  // oneDNN 2.x's names (it reads them in any case): whether bf16 and VNNI instructions are inside the cap.
  // AVX2_VNNI needs the CPU's AVX-VNNI, which ipj does not probe: counted as without (7-bit int8 weights,
  // the safe side).
  struct Inside {
    bool bf16;
    bool vnni;
  };
  static const std::map<std::string, Inside> kCaps = {{"SSE41", {false, false}},
                                                      {"AVX", {false, false}},
                                                      {"AVX2", {false, false}},
                                                      {"AVX2_VNNI", {false, false}},
                                                      {"AVX512_MIC", {false, false}},
                                                      {"AVX512_MIC_4OPS", {false, false}},
                                                      {"AVX512_CORE", {false, false}},
                                                      {"AVX512_CORE_VNNI", {false, true}},
                                                      {"AVX512_CORE_BF16", {true, true}},
                                                      {"AVX512_CORE_FP16", {true, true}},
                                                      {"AVX512_CORE_AMX", {true, true}},
                                                      {"AVX512_CORE_AMX_FP16", {true, true}},
                                                      {"ALL", {true, true}}};
  std::string upper = value;
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
  const auto known = kCaps.find(upper);
  if (known == kCaps.end()) return std::nullopt;
  return OnednnIsaCap{variable, value, known->second.bf16, known->second.vnni};
}

std::optional<OnednnIsaCap> onednn_isa_cap_from_environment() {
  for (const char* variable : {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"}) {
    const char* value = std::getenv(variable);
    if (value != nullptr && *value != '\0') return parse_onednn_isa_cap(variable, value);
  }
  return std::nullopt;
}

std::uint64_t available_memory_bytes() {
  std::uint64_t available = std::numeric_limits<std::uint64_t>::max();
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  std::uint64_t kibibytes = 0;
  while (meminfo >> key >> kibibytes) {
    if (key == "MemAvailable:") {
      available = kibibytes * 1024;
      break;
    }
    meminfo.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  const std::uint64_t limit = read_number_file("/sys/fs/cgroup/memory.max");
  if (limit > 0) {
    const std::uint64_t used = read_number_file("/sys/fs/cgroup/memory.current");
    available = std::min(available, limit > used ? limit - used : 0);
  }
  if (available == std::numeric_limits<std::uint64_t>::max()) {
    const long pages = ::sysconf(_SC_PHYS_PAGES);
    const long page_size = ::sysconf(_SC_PAGESIZE);
    if (pages > 0 && page_size > 0) available = static_cast<std::uint64_t>(pages) * page_size;
  }
  return available;
}

bool CpuInfo::has(const std::string& feature) const {
  auto found = features.find(feature);
  return found != features.end() && found->second;
}

CpuInfo probe_cpu() {
  CpuInfo info;
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page_size > 0) info.memory_bytes = static_cast<std::uint64_t>(pages) * page_size;

  const Leaf7Features leaf7 = read_leaf7();
  if (cpuinfo_initialize()) {
    const cpuinfo_package* package = cpuinfo_get_package(0);
    if (package != nullptr) info.model = package->name;
    info.cores = static_cast<int>(cpuinfo_get_cores_count());
    info.logical_processors = static_cast<int>(cpuinfo_get_processors_count());
#if CPUINFO_ARCH_X86 || CPUINFO_ARCH_X86_64
    info.features = {
        {"avx2", cpuinfo_has_x86_avx2()},
        {"fma3", cpuinfo_has_x86_fma3()},
        {"avx512f", cpuinfo_has_x86_avx512f()},
        {"avx512bw", cpuinfo_has_x86_avx512bw()},
        {"avx512vl", cpuinfo_has_x86_avx512vl()},
        {"avx512_vnni", cpuinfo_has_x86_avx512vnni()},
        {"avx512_bf16", cpuinfo_has_x86_avx512bf16()},
    };
#endif
  }
  info.features["avx512_fp16"] = leaf7.avx512_fp16;
  info.features["amx_bf16"] = leaf7.amx_bf16;
  info.features["amx_int8"] = leaf7.amx_int8;
  info.features["amx"] = leaf7.amx_tile && (leaf7.amx_bf16 || leaf7.amx_int8);
  for (const char* key : {"avx2", "fma3", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16"})
    info.features.emplace(key, false);  // non-x86 or cpuinfo failure: report false, not missing
  if (info.cores <= 0) info.cores = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  if (info.logical_processors <= 0) info.logical_processors = info.cores;
  if (info.model.empty()) info.model = "unknown CPU";
  info.onednn_cap = onednn_isa_cap_from_environment();
  return info;
}

std::vector<std::string> native_cpu_precisions(const CpuInfo& cpu) {
  std::vector<std::string> precisions{"fp32"};
  const bool onednn_may_use_bf16 = !cpu.onednn_cap || cpu.onednn_cap->allows_bf16;
  if ((cpu.has("avx512_bf16") || cpu.has("amx_bf16")) && onednn_may_use_bf16) precisions.push_back("bf16");
  if (cpu.has("avx512_fp16") && onednn_may_use_bf16) precisions.push_back("fp16");
  if (onednn_int8_has_vnni(cpu)) precisions.push_back("int8");
  return precisions;
}

bool bf16_held_back_by_onednn_cap(const CpuInfo& cpu) {
  return (cpu.has("avx512_bf16") || cpu.has("amx_bf16")) && cpu.onednn_cap && !cpu.onednn_cap->allows_bf16;
}

bool onednn_int8_has_vnni(const CpuInfo& cpu) {
  return (cpu.has("avx512_vnni") || cpu.has("amx_int8")) && (!cpu.onednn_cap || cpu.onednn_cap->allows_vnni);
}

}  // namespace ipj::device
