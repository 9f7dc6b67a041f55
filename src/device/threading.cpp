// Applying thread plans to ATen and (through dlsym, no link-time dependency) OpenBLAS.
#include "ipj/device/threading.hpp"

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>

namespace ipj::device {
namespace {

using SetThreadsFunction = void (*)(int);
using GetThreadsFunction = int (*)();

template <typename Function>
Function find_blas_symbol(const char* name) {
  return reinterpret_cast<Function>(::dlsym(RTLD_DEFAULT, name));
}

}  // namespace

int online_cores() {
  return std::max(1, static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)));
}

ThreadPlan plan_threads(const std::string& precision, int cores, bool convolutional) {
  const int available = cores > 0 ? cores : online_cores();
  ThreadPlan plan;
  if (precision == "fp32" && !convolutional) {
    plan.torch_threads = 1;
    plan.blas_threads = available;
    plan.reason = "fp32: OpenBLAS GEMM on " + std::to_string(available) +
                  " thread(s), ATen at 1 thread (both pools at full width oversubscribe)";
  } else {
    plan.torch_threads = available;
    plan.blas_threads = 1;
    plan.reason = precision + (convolutional ? " convolutional model" : "") +
                  ": oneDNN kernels on the ATen/OpenMP pool with " + std::to_string(available) +
                  " thread(s), OpenBLAS at 1";
  }
  return plan;
}

ThreadPlan python_default_thread_plan(int cores) {
  const int available = cores > 0 ? cores : online_cores();
  return ThreadPlan{
      1, available,
      "untuned: Python torch's default (ATen 1 thread, OpenBLAS " + std::to_string(available) + " threads)"};
}

void apply_thread_plan(const ThreadPlan& plan) {
  at::set_num_threads(std::max(1, plan.torch_threads));
  if (auto set_threads = find_blas_symbol<SetThreadsFunction>("openblas_set_num_threads"))
    set_threads(std::max(1, plan.blas_threads));
}

int blas_thread_count() {
  if (auto get_threads = find_blas_symbol<GetThreadsFunction>("openblas_get_num_threads"))
    return get_threads();
  return -1;
}

}  // namespace ipj::device
