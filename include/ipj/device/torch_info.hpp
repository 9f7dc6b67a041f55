// What the linked LibTorch build provides: version, oneDNN/OpenMP/MKL, threads, quantized engines, CUDA.
// The API is LibTorch-free so that the CLI can print it without LibTorch headers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ipj::device {

struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  std::uint64_t memory_bytes = 0;
  int compute_major = 0;
  int compute_minor = 0;
  bool bf16_native = false;  // Ampere (sm_80) and newer
  bool fp16_native = true;
};

struct TorchInfo {
  std::string version;
  bool onednn = false;
  bool openmp = false;
  bool mkl = false;
  bool cuda_built = false;      // this ipj binary was built with IPJ_WITH_CUDA
  bool cuda_available = false;  // and a CUDA device is usable now
  int intra_op_threads = 0;
  std::string
      cpu_kernels;  // ATen's vectorised kernels in use ("AVX2", "AVX512", "NO AVX"), as show_config says
  std::vector<std::string> quantized_engines;
  std::vector<CudaDeviceInfo> cuda_devices;
  bool mps_available = false;  // always false on Linux (MPS is Apple-only)
};

TorchInfo probe_torch();

// The "CPU capability usage: X" line of LibTorch's show_config() text: X, or "" when the line is missing.
std::string cpu_kernels_in(const std::string& show_config_text);

// Devices an --device flag may name here: "cpu", and "cuda:N" for each usable GPU.
std::vector<std::string> usable_devices(const TorchInfo& torch_info);

}  // namespace ipj::device
