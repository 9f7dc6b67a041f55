// Thread settings for the two pools that run LibTorch CPU kernels: ATen's intra-op OpenMP pool (oneDNN, bf16,
// elementwise) and OpenBLAS's own pthreads (fp32 GEMM). Setting both to all cores oversubscribes the CPU.
#pragma once

#include <string>

namespace ipj::device {

struct ThreadPlan {
  int torch_threads = 1;  // at::set_num_threads
  int blas_threads = 1;   // openblas_set_num_threads (ignored when the BLAS is not OpenBLAS)
  std::string reason;     // why this plan, for results and logs
};

// The plan for a precision ("fp32", "bf16", ...) on `cores` cores (0 = all online cores), for a model
// dominated by convolutions or by GEMMs. Measured on Zen 4 / Debian LibTorch 1.13 (docs/PERFORMANCE.md): fp32
// GEMM-bound models run fastest with OpenBLAS owning the cores and ATen at one thread; convolutions (oneDNN)
// and every bf16 kernel run on ATen's OpenMP pool, which then gets the cores while OpenBLAS drops to one
// thread.
ThreadPlan plan_threads(const std::string& precision, int cores, bool convolutional = false);

// What Debian's Python torch does by default (the seeds' loop): ATen at 1 thread, OpenBLAS on every core.
ThreadPlan python_default_thread_plan(int cores);

void apply_thread_plan(const ThreadPlan& plan);

// OpenBLAS's current thread count, or -1 when the loaded BLAS is not OpenBLAS.
int blas_thread_count();

int online_cores();

}  // namespace ipj::device
