// The oneDNN ISA cap (ONEDNN_MAX_CPU_ISA / DNNL_MAX_CPU_ISA) and the native CPU precisions it leaves: pure
// functions on synthetic CPUs, so every CPU this runs on checks the same cases.
#include <gtest/gtest.h>

#include "ipj/device/cpu_info.hpp"

namespace ipj::device {
namespace {

CpuInfo cpu_with(std::map<std::string, bool> features) {
  CpuInfo cpu;
  cpu.features = std::move(features);
  return cpu;
}

}  // namespace

TEST(OnednnIsaCap, KnownCapsSayWhetherBf16InstructionsAreInsideAndUnknownOnesAreIgnored) {
  // AVX2_VNNI counts as without VNNI: it needs the CPU's AVX-VNNI, which ipj does not probe
  for (const char* below : {"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX512_CORE", "AVX512_CORE_VNNI"}) {
    const auto cap = parse_onednn_isa_cap("ONEDNN_MAX_CPU_ISA", below);
    ASSERT_TRUE(cap) << below;
    EXPECT_FALSE(cap->allows_bf16) << below;
    EXPECT_EQ(cap->allows_vnni, std::string(below) == "AVX512_CORE_VNNI") << below;
    EXPECT_EQ(cap->value, below);
    EXPECT_EQ(cap->variable, "ONEDNN_MAX_CPU_ISA");
  }
  for (const char* inside : {"AVX512_CORE_BF16", "AVX512_CORE_AMX", "AVX512_CORE_FP16", "ALL"}) {
    const auto cap = parse_onednn_isa_cap("DNNL_MAX_CPU_ISA", inside);
    ASSERT_TRUE(cap) << inside;
    EXPECT_TRUE(cap->allows_bf16) << inside;
    EXPECT_TRUE(cap->allows_vnni) << inside;
  }
  // oneDNN reads its names in any case (python3-torch with ONEDNN_MAX_CPU_ISA=avx2 refuses a bf16 matmul on
  // an AVX512_BF16 CPU) and ignores anything else; so does ipj
  const auto lower = parse_onednn_isa_cap("ONEDNN_MAX_CPU_ISA", "avx2");
  ASSERT_TRUE(lower);
  EXPECT_FALSE(lower->allows_bf16);
  EXPECT_EQ(lower->value, "avx2");
  EXPECT_FALSE(parse_onednn_isa_cap("ONEDNN_MAX_CPU_ISA", "AVX3"));
  EXPECT_FALSE(parse_onednn_isa_cap("ONEDNN_MAX_CPU_ISA", ""));
}

// The int8 side decides whether LibTorch's oneDNN int8 kernels get 7-bit weights (quantized_kernels.hpp): a
// cap below VNNI must say "no VNNI", or they saturate (the AVX2-capped test suite's int8 rows were 13 quanta
// off XNNPACK's exact answers before).
TEST(OnednnIsaCap, ACapTakesOutOfTheNativePrecisionsWhatItKeepsOneDnnFrom) {
  const CpuInfo bf16_cpu = cpu_with({{"avx512_bf16", true}, {"avx512_vnni", true}});
  using Precisions = std::vector<std::string>;
  EXPECT_EQ(native_cpu_precisions(bf16_cpu), (Precisions{"fp32", "bf16", "int8"}));
  EXPECT_TRUE(onednn_int8_has_vnni(bf16_cpu));
  CpuInfo capped = bf16_cpu;
  capped.onednn_cap = parse_onednn_isa_cap("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_VNNI");
  EXPECT_EQ(native_cpu_precisions(capped), (Precisions{"fp32", "int8"}));
  EXPECT_TRUE(onednn_int8_has_vnni(capped));
  EXPECT_TRUE(bf16_held_back_by_onednn_cap(capped));
  EXPECT_FALSE(bf16_held_back_by_onednn_cap(bf16_cpu));  // no cap
  capped.onednn_cap = parse_onednn_isa_cap("ONEDNN_MAX_CPU_ISA", "avx2");
  EXPECT_EQ(native_cpu_precisions(capped), (Precisions{"fp32"}));
  EXPECT_FALSE(onednn_int8_has_vnni(capped));
  capped.onednn_cap = parse_onednn_isa_cap("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16");
  EXPECT_EQ(native_cpu_precisions(capped), (Precisions{"fp32", "bf16", "int8"}));
  EXPECT_FALSE(bf16_held_back_by_onednn_cap(capped));  // the cap reaches bf16
  // AMX-BF16 counts as bf16 hardware, and a cap below it removes it the same way
  CpuInfo amx = cpu_with({{"amx_bf16", true}});
  EXPECT_EQ(native_cpu_precisions(amx), (Precisions{"fp32", "bf16"}));
  amx.onednn_cap = parse_onednn_isa_cap("DNNL_MAX_CPU_ISA", "AVX2");
  EXPECT_EQ(native_cpu_precisions(amx), (Precisions{"fp32"}));
  // an AVX2-only CPU has no bf16 or VNNI with or without a cap
  EXPECT_EQ(native_cpu_precisions(cpu_with({{"avx2", true}})), (Precisions{"fp32"}));
  EXPECT_FALSE(onednn_int8_has_vnni(cpu_with({{"avx2", true}})));
  CpuInfo avx2_capped = cpu_with({{"avx2", true}});
  avx2_capped.onednn_cap = parse_onednn_isa_cap("ONEDNN_MAX_CPU_ISA", "AVX2");
  EXPECT_FALSE(bf16_held_back_by_onednn_cap(avx2_capped));  // nothing to hold back
}

}  // namespace ipj::device
