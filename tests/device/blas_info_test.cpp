// BLAS kernels: OpenBLAS core names to ISAs, the advice when they are below the CPU's ISA (forced by
// OPENBLAS_CORETYPE or not), and what this process's OpenBLAS reports.
#include <gtest/gtest.h>

#include <cstdlib>

#include "ipj/device/blas_info.hpp"

namespace ipj::device {
namespace {

CpuInfo cpu_with(std::initializer_list<const char*> features) {
  CpuInfo cpu;
  for (const char* feature : {"avx2", "fma3", "avx512f"})
    cpu.features[feature] = false;
  for (const char* feature : features)
    cpu.features[feature] = true;
  return cpu;
}

BlasInfo openblas(const std::string& kernels, const std::string& forced_by = "") {
  BlasInfo blas;
  blas.library = "OpenBLAS";
  blas.kernels = kernels;
  blas.kernel_isa = blas_kernel_isa(kernels);
  blas.forced_by = forced_by;
  return blas;
}

TEST(BlasInfo, CoreNamesReadAsTheirKernelsIsa) {
  EXPECT_EQ(blas_kernel_isa("Haswell"), BlasKernelIsa::avx2);
  EXPECT_EQ(blas_kernel_isa("ZEN"), BlasKernelIsa::avx2);
  EXPECT_EQ(blas_kernel_isa("SkylakeX"), BlasKernelIsa::avx512);
  EXPECT_EQ(blas_kernel_isa("cooperlake"), BlasKernelIsa::avx512);
  EXPECT_EQ(blas_kernel_isa("Prescott"), BlasKernelIsa::older);
  EXPECT_EQ(blas_kernel_isa("Sandybridge"), BlasKernelIsa::older);
  EXPECT_EQ(blas_kernel_isa("NeoverseN1"), BlasKernelIsa::unknown);
  EXPECT_EQ(blas_kernel_isa(""), BlasKernelIsa::unknown);
}

TEST(BlasInfo, AdviceOnlyWhenTheKernelsAreBelowTheCpu) {
  const CpuInfo avx512 = cpu_with({"avx2", "fma3", "avx512f"});
  const CpuInfo avx2 = cpu_with({"avx2", "fma3"});
  const CpuInfo old = cpu_with({});

  const std::string forced = blas_advice(openblas("Haswell", "OPENBLAS_CORETYPE=Haswell"), avx512);
  EXPECT_NE(forced.find("Haswell kernels (AVX2) on a CPU with AVX-512"), std::string::npos) << forced;
  EXPECT_NE(
      forced.find("because OPENBLAS_CORETYPE=Haswell is set; unset it (or set OPENBLAS_CORETYPE=SkylakeX)"),
      std::string::npos)
      << forced;
  const std::string detected = blas_advice(openblas("Prescott"), avx2);
  EXPECT_NE(detected.find("Prescott kernels (SSE/AVX) on a CPU with AVX2"), std::string::npos) << detected;
  EXPECT_NE(detected.find("set OPENBLAS_CORETYPE=Haswell before starting ipj"), std::string::npos)
      << detected;

  EXPECT_EQ(blas_advice(openblas("SkylakeX"), avx512), "");
  EXPECT_EQ(blas_advice(openblas("SkylakeX", "OPENBLAS_CORETYPE=SkylakeX"), avx512), "");
  EXPECT_EQ(blas_advice(openblas("Haswell", "OPENBLAS_CORETYPE=Haswell"), avx2), "");
  EXPECT_EQ(blas_advice(openblas("Prescott"), old), "");
  EXPECT_EQ(blas_advice(openblas("NeoverseN1"), avx512), "");  // unknown kernels: no claim
}

// Debian's LibTorch runs its fp32 GEMMs on OpenBLAS (a DYNAMIC_ARCH build): its core name is one of the
// table's, and the record says whether OPENBLAS_CORETYPE chose it.
TEST(BlasInfo, TheLoadedOpenBlasNamesItsKernels) {
  const BlasInfo& blas = loaded_blas();
  if (blas.library != "OpenBLAS") GTEST_SKIP() << "this LibTorch's BLAS is not OpenBLAS";
  EXPECT_NE(blas.kernel_isa, BlasKernelIsa::unknown) << blas.kernels;
  EXPECT_NE(blas.config.find("OpenBLAS"), std::string::npos) << blas.config;
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  EXPECT_EQ(blas.forced_by, forced && *forced ? std::string("OPENBLAS_CORETYPE=") + forced : "");
  EXPECT_EQ(blas.advice, blas_advice(blas, probe_cpu()));
  const Json record = to_json(blas);
  EXPECT_EQ(record["kernels"], blas.kernels);
  EXPECT_NE(blas_kernels_text(blas).find(blas.kernels + " kernels"), std::string::npos);
}

}  // namespace
}  // namespace ipj::device
