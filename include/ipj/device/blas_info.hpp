// Which BLAS runs LibTorch's fp32 GEMMs here and which of its kernels: OpenBLAS's core name (through dlsym,
// no link-time dependency) and whether it is below what the CPU runs, e.g. forced by OPENBLAS_CORETYPE.
// Limits: OpenBLAS only (another BLAS reads as "unknown"); the kernel's ISA from a table of core names.
#pragma once

#include <string>
#include <string_view>

#include "ipj/core/json_io.hpp"
#include "ipj/device/cpu_info.hpp"

namespace ipj::device {

// The widest vector ISA a BLAS kernel set uses.
enum class BlasKernelIsa { unknown, older, avx2, avx512 };

struct BlasInfo {
  std::string library = "unknown";  // "OpenBLAS" when its symbols are loaded
  std::string config;               // openblas_get_config(): version and build options
  std::string kernels;              // openblas_get_corename(), e.g. "Haswell", "SkylakeX"
  BlasKernelIsa kernel_isa = BlasKernelIsa::unknown;
  std::string forced_by;  // "OPENBLAS_CORETYPE=Haswell" when that variable is set, else empty
  std::string advice;     // empty unless the kernels are below the CPU's ISA: what it costs, how to fix it
};

// The ISA of an OpenBLAS core name (case-insensitive; unknown for names not in the table).
BlasKernelIsa blas_kernel_isa(std::string_view core_name);
std::string_view isa_name(BlasKernelIsa isa);

// What the kernels cost on this CPU and how to get better ones; empty when they match it.
std::string blas_advice(const BlasInfo& blas, const CpuInfo& cpu);

// The loaded BLAS (read once per process: OpenBLAS picks its kernels when it loads).
const BlasInfo& loaded_blas();

// {library, config, kernels, kernel_isa, forced_by, advice}
Json to_json(const BlasInfo& blas);
// "OpenBLAS Haswell kernels (AVX2, forced by OPENBLAS_CORETYPE=Haswell)", for results' threads.blas_kernels.
std::string blas_kernels_text(const BlasInfo& blas);

}  // namespace ipj::device
