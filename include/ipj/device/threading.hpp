// Thread settings for the two pools that run LibTorch CPU kernels: ATen's intra-op OpenMP pool (oneDNN, bf16,
// elementwise) and OpenBLAS's own pthreads (fp32 GEMM). Setting both to all cores oversubscribes the CPU.
// Applying a plan changes process-wide state: use device::ScopedProcessSettings (process_settings.hpp).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <utility>

#include "ipj/core/choice.hpp"
#include "ipj/device/machine_load.hpp"

namespace ipj::device {

struct ThreadPlan {
  ThreadPlan() = default;
  ThreadPlan(int torch, int blas, std::string why)
      : torch_threads(torch), blas_threads(blas), reason(std::move(why)) {}

  int torch_threads = 1;        // at::set_num_threads
  int blas_threads = 1;         // openblas_set_num_threads (ignored when the BLAS is not OpenBLAS)
  std::string reason;           // why this plan, for results and logs
  std::string plan = "tuned";   // the --thread-plan choice that made it (tuned | python)
  int available_cpus = 0;       // CPUs the plan saw (affinity capped by the quota); 0 = not read
  std::optional<double> quota;  // CPUs from the cgroup CPU quota; nullopt = none
};

// --thread-plan: ipj's plan for the work (tuned) or what Python torch does by default (python).
enum class ThreadPlanChoice { tuned, python };

// Which pool runs the work's dominant kernels.
enum class ThreadWorkload {
  fp32_gemm,  // fp32 models dominated by GEMMs (mlp): OpenBLAS
  onednn,     // convolutions and every bf16/fp16 kernel: oneDNN on ATen's OpenMP pool
};

// fp32 GEMM-bound unless reduced precision or convolutions put oneDNN in charge.
ThreadWorkload thread_workload(bool fp32, bool convolutional);

// The plan for `workload` on `cores` cores (0 = all online cores). Measured on Zen 4 / Debian LibTorch 1.13
// (docs/PERFORMANCE.md): fp32 GEMM-bound models run fastest with OpenBLAS owning the cores and ATen at one
// thread; convolutions (oneDNN) and every bf16 kernel run on ATen's OpenMP pool, which then gets the cores
// while OpenBLAS drops to one thread.
ThreadPlan plan_threads(ThreadWorkload workload, int cores);

// What Debian's Python torch does by default (the seeds' loop): ATen at 1 thread, OpenBLAS on every core.
ThreadPlan python_default_thread_plan(int cores);

// The plan a choice stands for.
ThreadPlan plan_for(ThreadPlanChoice choice, ThreadWorkload workload, int cores);

// The CPUs the tuned plan uses on the machine as it is: those available, less round(other work) when busy
// (at least 1).
int usable_cpus(const MachineState& machine);

// The plan for the machine as it is: `cores` > 0 (--threads) is taken as given; otherwise the tuned plan
// uses the CPUs really available (affinity, cgroup quota) and, when other work used >= kBusyOtherCpus beside
// us, leaves that many CPUs to it (at least one thread each): a pool sized to every core waits on preempted
// threads under a neighbour. The python plan stays Python torch's default whatever the machine.
ThreadPlan plan_for_machine(ThreadPlanChoice choice, ThreadWorkload workload, int cores,
                            const MachineState& machine);

// {plan, reason, available_cpus, quota, torch, blas, omp_wait_policy, blas_wait, wait_policy_reason,
// blas_kernels}: the `threads` record of results files.
Json to_json(const ThreadPlan& plan);
// The threads of a command that plans none (quantize, prune, distill: LibTorch's defaults): {plan
// "libtorch-default", reason, torch (ATen's pool size now), omp_wait_policy, blas_wait, wait_policy_reason,
// blas_kernels}.
Json unplanned_threads_json();

// Sets both pools (process-wide; prefer ScopedProcessSettings, which restores them).
void apply_thread_plan(const ThreadPlan& plan);

// OpenBLAS's thread count for the process (nothing when the loaded BLAS is not OpenBLAS). Not while another
// thread runs a BLAS call.
void set_blas_threads(int threads);

// OpenBLAS's current thread count, or -1 when the loaded BLAS is not OpenBLAS.
int blas_thread_count();

int online_cores();

// The calling thread's OpenMP thread count (ATen's intra-op pool and oneDNN read it at each parallel region)
// set for one scope and put back after. Cheap (at::set_num_threads would also rebuild pthreadpool) and
// local to the calling thread. Does nothing when no OpenMP runtime is loaded.
class CallerOpenMpThreads {
 public:
  explicit CallerOpenMpThreads(int threads);
  ~CallerOpenMpThreads();
  CallerOpenMpThreads(const CallerOpenMpThreads&) = delete;
  CallerOpenMpThreads& operator=(const CallerOpenMpThreads&) = delete;

 private:
  int previous_ = 0;  // 0: nothing was set
};

// The calling thread's OpenMP thread count (1 without an OpenMP runtime).
int caller_openmp_threads();

// The threads libgomp really gives a parallel region when the user's OpenMP settings cap it below what
// omp_get_max_threads() reports, which LibTorch's oneDNN kernels split their work for: handed fewer, they
// answered wrong (static int8 accuracy 0.15 against 0.66), trained to NaN or hung (a hostile pass, 12-07).
// OMP_THREAD_LIMIT=N: N; OMP_MAX_ACTIVE_LEVELS=0: 1 (every region serialised); OMP_DYNAMIC=true: 1 (libgomp
// may hand out fewer at any region). Read once; `threads` 0 where nothing caps.
struct OpenMpTeamLimit {
  int threads = 0;
  std::string reason;  // e.g. "OMP_THREAD_LIMIT=1 caps OpenMP at 1 thread(s)"
};
const OpenMpTeamLimit& openmp_team_limit();
// `requested` OpenMP threads, lowered to the team limit.
int openmp_threads_allowed(int requested);
// At process start: ATen's pool lowered to the team limit (with one warning), so commands that plan no
// threads also run their kernels within it.
void limit_openmp_to_team();

// Sets the calling thread's OpenMP thread count for good (ATen's pool and oneDNN on this thread), after
// LibTorch's own per-thread first-use setting (which would otherwise overwrite it later). Unlike
// at::set_num_threads it leaves LibTorch's shared pthreadpool alone: safe while other threads run models.
void set_caller_openmp_threads(int threads);

}  // namespace ipj::device

namespace ipj {
template <>
struct ChoiceNames<device::ThreadPlanChoice> {
  static constexpr std::array<std::pair<device::ThreadPlanChoice, const char*>, 2> names{
      {{device::ThreadPlanChoice::tuned, "tuned"}, {device::ThreadPlanChoice::python, "python"}}};
};
}  // namespace ipj
