// LibTorch build facts and CUDA devices (CUDA device properties only in IPJ_WITH_CUDA builds).
#include "ipj/device/torch_info.hpp"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <c10/core/QEngine.h>
#include <torch/cuda.h>

#include "ipj/core/torch_compat.hpp"

#ifdef IPJ_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace ipj::device {

TorchInfo probe_torch() {
  TorchInfo info;
  info.version = compat::torch_version();
  info.onednn = at::hasMKLDNN();
  info.openmp = at::hasOpenMP();
  info.mkl = at::hasMKL();
  info.intra_op_threads = at::get_num_threads();
  info.cpu_kernels = cpu_kernels_in(at::show_config());  // LibTorch exports no getter for it
  for (const at::QEngine engine : at::globalContext().supportedQEngines()) {
    if (engine == at::QEngine::NoQEngine) continue;
    info.quantized_engines.push_back(c10::toString(engine));
  }
#ifdef IPJ_WITH_CUDA
  info.cuda_built = true;
  info.cuda_available = torch::cuda::is_available();
  if (info.cuda_available) {
    const int count = static_cast<int>(torch::cuda::device_count());
    for (int index = 0; index < count; ++index) {
      const cudaDeviceProp* properties = at::cuda::getDeviceProperties(index);
      CudaDeviceInfo device;
      device.index = index;
      device.name = properties->name;
      device.memory_bytes = properties->totalGlobalMem;
      device.compute_major = properties->major;
      device.compute_minor = properties->minor;
      device.bf16_native = properties->major >= 8;
      device.fp16_native = properties->major >= 6;
      info.cuda_devices.push_back(device);
    }
  }
#endif
  return info;
}

std::string cpu_kernels_in(const std::string& show_config_text) {
  const std::string key = "CPU capability usage: ";
  const std::size_t start = show_config_text.find(key);
  if (start == std::string::npos) return "";
  const std::size_t value = start + key.size();
  const std::size_t end = show_config_text.find('\n', value);
  return show_config_text.substr(value, end == std::string::npos ? std::string::npos : end - value);
}

std::vector<std::string> usable_devices(const TorchInfo& torch_info) {
  std::vector<std::string> devices{"cpu"};
  for (const auto& device : torch_info.cuda_devices)
    devices.push_back("cuda:" + std::to_string(device.index));
  return devices;
}

}  // namespace ipj::device
