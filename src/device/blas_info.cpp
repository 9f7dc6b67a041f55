// The loaded BLAS's kernels (OpenBLAS core name via dlsym) and whether they are below the CPU's ISA.
// Limits: the core-name table covers OpenBLAS 0.3.x's x86-64 names; others read as unknown (no advice).
#include "ipj/device/blas_info.hpp"
#include "loaded_symbol.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <utility>

namespace ipj::device {
namespace {

using NameFunction = char* (*)();

NameFunction loaded_function(const char* name) {
  return loaded_symbol<NameFunction>(name);
}

std::string lower(std::string_view text) {
  std::string result(text);
  std::transform(result.begin(), result.end(), result.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return result;
}

// OpenBLAS's x86-64 core names (DYNAMIC_ARCH builds) and the widest ISA their kernels use.
constexpr std::array<std::pair<std::string_view, BlasKernelIsa>, 22> kCoreIsa{{
    {"skylakex", BlasKernelIsa::avx512},
    {"cooperlake", BlasKernelIsa::avx512},
    {"sapphirerapids", BlasKernelIsa::avx512},
    {"haswell", BlasKernelIsa::avx2},
    {"zen", BlasKernelIsa::avx2},
    {"excavator", BlasKernelIsa::avx2},
    {"sandybridge", BlasKernelIsa::older},
    {"bulldozer", BlasKernelIsa::older},
    {"piledriver", BlasKernelIsa::older},
    {"steamroller", BlasKernelIsa::older},
    {"nehalem", BlasKernelIsa::older},
    {"core2", BlasKernelIsa::older},
    {"penryn", BlasKernelIsa::older},
    {"dunnington", BlasKernelIsa::older},
    {"prescott", BlasKernelIsa::older},
    {"atom", BlasKernelIsa::older},
    {"barcelona", BlasKernelIsa::older},
    {"bobcat", BlasKernelIsa::older},
    {"opteron", BlasKernelIsa::older},
    {"opteron_sse3", BlasKernelIsa::older},
    {"katmai", BlasKernelIsa::older},
    {"banias", BlasKernelIsa::older},
}};

// The widest ISA this CPU runs that a BLAS kernel set could use.
BlasKernelIsa cpu_isa(const CpuInfo& cpu) {
  if (cpu.has("avx512f")) return BlasKernelIsa::avx512;
  if (cpu.has("avx2") && cpu.has("fma3")) return BlasKernelIsa::avx2;
  return BlasKernelIsa::older;
}

BlasInfo probe_blas() {
  BlasInfo blas;
  const NameFunction core_name = loaded_function("openblas_get_corename");
  if (core_name == nullptr) return blas;
  blas.library = "OpenBLAS";
  if (const NameFunction config = loaded_function("openblas_get_config"); config && config())
    blas.config = config();
  if (const char* name = core_name()) blas.kernels = name;
  blas.kernel_isa = blas_kernel_isa(blas.kernels);
  if (const char* forced = std::getenv("OPENBLAS_CORETYPE"); forced && *forced)
    blas.forced_by = std::string("OPENBLAS_CORETYPE=") + forced;
  blas.advice = blas_advice(blas, probe_cpu());
  return blas;
}

}  // namespace

BlasKernelIsa blas_kernel_isa(std::string_view core_name) {
  const std::string name = lower(core_name);
  for (const auto& [core, isa] : kCoreIsa)
    if (name == core) return isa;
  return BlasKernelIsa::unknown;
}

std::string_view isa_name(BlasKernelIsa isa) {
  switch (isa) {
    case BlasKernelIsa::avx512:
      return "AVX-512";
    case BlasKernelIsa::avx2:
      return "AVX2";
    case BlasKernelIsa::older:
      return "SSE/AVX";
    case BlasKernelIsa::unknown:
      break;
  }
  return "unknown ISA";
}

std::string blas_advice(const BlasInfo& blas, const CpuInfo& cpu) {
  const BlasKernelIsa wanted = cpu_isa(cpu);
  if (blas.kernel_isa == BlasKernelIsa::unknown || blas.kernel_isa >= wanted) return "";
  const std::string better = wanted == BlasKernelIsa::avx512 ? "SkylakeX" : "Haswell";
  const std::string what = blas.library + " runs its " + blas.kernels + " kernels (" +
                           std::string(isa_name(blas.kernel_isa)) + ") on a CPU with " +
                           std::string(isa_name(wanted)) + ": fp32 GEMMs (fp32 training and inference of " +
                           "GEMM-bound models) can run 2x slower or more";
  if (!blas.forced_by.empty())
    return what + ", because " + blas.forced_by + " is set; unset it (or set OPENBLAS_CORETYPE=" + better +
           ") before starting ipj";
  return what + " (OpenBLAS may not know this CPU); set OPENBLAS_CORETYPE=" + better + " before starting ipj";
}

const BlasInfo& loaded_blas() {
  static const BlasInfo blas = probe_blas();
  return blas;
}

Json to_json(const BlasInfo& blas) {
  return Json{{"library", blas.library},
              {"config", blas.config},
              {"kernels", blas.kernels},
              {"kernel_isa", std::string(isa_name(blas.kernel_isa))},
              {"forced_by", blas.forced_by.empty() ? Json(nullptr) : Json(blas.forced_by)},
              {"advice", blas.advice}};
}

std::string blas_kernels_text(const BlasInfo& blas) {
  if (blas.library == "unknown") return "unknown BLAS (not OpenBLAS)";
  std::string text = blas.library + " " + (blas.kernels.empty() ? "?" : blas.kernels) + " kernels (" +
                     std::string(isa_name(blas.kernel_isa));
  if (!blas.forced_by.empty()) text += ", forced by " + blas.forced_by;
  return text + ")";
}

}  // namespace ipj::device
