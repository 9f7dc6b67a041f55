// Applying thread plans to ATen and (through dlsym, no link-time dependency) OpenBLAS and OpenMP.
#include "ipj/device/threading.hpp"
#include "ipj/device/blas_info.hpp"
#include "ipj/device/openmp_binding.hpp"
#include "ipj/device/wait_policy.hpp"
#include "loaded_symbol.hpp"

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "ipj/core/log.hpp"

namespace ipj::device {
namespace {

using SetThreadsFunction = void (*)(int);
using GetThreadsFunction = int (*)();

}  // namespace

int online_cores() {
  return std::max(1, static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN)));
}

ThreadWorkload thread_workload(bool fp32, bool convolutional) {
  return fp32 && !convolutional ? ThreadWorkload::fp32_gemm : ThreadWorkload::onednn;
}

ThreadPlan plan_threads(ThreadWorkload workload, int cores) {
  const int available = cores > 0 ? cores : online_cores();
  if (workload == ThreadWorkload::fp32_gemm) {
    return ThreadPlan{1, available,
                      "fp32 GEMMs: OpenBLAS on " + std::to_string(available) +
                          " thread(s), ATen at 1 thread (both pools at full width oversubscribe)"};
  }
  return ThreadPlan{available, 1,
                    "oneDNN kernels (convolutions, bf16/fp16) on the ATen/OpenMP pool with " +
                        std::to_string(available) + " thread(s), OpenBLAS at 1"};
}

ThreadPlan python_default_thread_plan(int cores) {
  const int available = cores > 0 ? cores : online_cores();
  return ThreadPlan{
      1, available,
      "untuned: Python torch's default (ATen 1 thread, OpenBLAS " + std::to_string(available) + " threads)"};
}

ThreadPlan plan_for(ThreadPlanChoice choice, ThreadWorkload workload, int cores) {
  ThreadPlan plan =
      choice == ThreadPlanChoice::tuned ? plan_threads(workload, cores) : python_default_thread_plan(cores);
  plan.plan = choice_name(choice);
  return plan;
}

int usable_cpus(const MachineState& machine) {
  const int available = std::max(1, machine.limits.available_cpus);
  if (!machine.busy) return available;
  return std::clamp(available - static_cast<int>(std::lround(machine.load.other_cpus)), 1, available);
}

ThreadPlan plan_for_machine(ThreadPlanChoice choice, ThreadWorkload workload, int cores,
                            const MachineState& machine) {
  const int available = std::max(1, machine.limits.available_cpus);
  std::string seen = std::to_string(available) + " CPU(s) available (affinity " +
                     std::to_string(machine.limits.affinity.size()) +
                     (machine.limits.cgroup.quota
                          ? ", cgroup quota " + std::to_string(*machine.limits.cgroup.quota).substr(0, 5)
                          : std::string(", no cgroup quota")) +
                     ")";
  ThreadPlan plan;
  if (choice == ThreadPlanChoice::python || cores > 0) {
    plan = plan_for(choice, workload, cores);
    if (cores > 0) seen += ", --threads " + std::to_string(cores) + " as given";
  } else {
    const int usable = usable_cpus(machine);
    if (machine.busy) {
      seen += "; busy: other work used " + std::to_string(machine.load.other_cpus).substr(0, 4) +
              " CPU(s) beside us, so " + std::to_string(usable) + " thread(s)";
    }
    plan = plan_for(choice, workload, usable);
  }
  plan.reason = seen + ": " + plan.reason;
  if (const OpenMpTeamLimit& limit = openmp_team_limit(); limit.threads > 0 && limit.threads < available) {
    plan.torch_threads = std::min(plan.torch_threads, limit.threads);
    plan.reason += "; " + limit.reason;
  }
  if (const auto& binding = widen_threads_bound_by_openmp(); !binding.reason.empty())
    plan.reason += "; " + binding.reason;
  plan.available_cpus = available;
  plan.quota = machine.limits.cgroup.quota;
  return plan;
}

Json to_json(const ThreadPlan& plan) {
  return Json{{"plan", plan.plan},
              {"reason", plan.reason},
              {"available_cpus", plan.available_cpus},
              {"quota", plan.quota ? Json(*plan.quota) : Json(nullptr)},
              {"torch", plan.torch_threads},
              {"blas", plan.blas_threads},
              {"omp_wait_policy", omp_wait_policy_description()},
              {"blas_wait", blas_wait_description()},
              {"wait_policy_reason", wait_policy_reason()},
              {"blas_kernels", blas_kernels_text(loaded_blas())}};
}

Json unplanned_threads_json() {
  const std::string& binding = widen_threads_bound_by_openmp().reason;
  return Json{{"plan", "libtorch-default"},
              {"reason", "this command does not plan threads: LibTorch's defaults" +
                             (binding.empty() ? std::string() : "; " + binding)},
              {"available_cpus", read_cpu_limits().available_cpus},
              {"torch", at::get_num_threads()},
              {"omp_wait_policy", omp_wait_policy_description()},
              {"blas_wait", blas_wait_description()},
              {"wait_policy_reason", wait_policy_reason()},
              {"blas_kernels", blas_kernels_text(loaded_blas())}};
}

void apply_thread_plan(const ThreadPlan& plan) {
  at::set_num_threads(openmp_threads_allowed(plan.torch_threads));
  set_blas_threads(plan.blas_threads);
}

void set_blas_threads(int threads) {
  if (auto set_threads = loaded_symbol<SetThreadsFunction>("openblas_set_num_threads"))
    set_threads(std::max(1, threads));
}

namespace {
using SetOpenMpThreads = void (*)(int);
using GetOpenMpThreads = int (*)();

// libgomp's worker stack size as it reads it: OMP_STACKSIZE, else GOMP_STACKSIZE, a whole number with an
// optional B, K, M or G suffix (K when none). 0 when unset or unreadable (libgomp then ignores it too).
std::size_t openmp_stack_bytes(const char*& variable) {
  for (const char* name : {"OMP_STACKSIZE", "GOMP_STACKSIZE"}) {
    const char* text = std::getenv(name);
    if (text == nullptr || *text == '\0') continue;
    variable = name;
    char* end = nullptr;
    const unsigned long long number = std::strtoull(text, &end, 10);
    while (std::isspace(static_cast<unsigned char>(*end)))
      ++end;
    const char unit = static_cast<char>(std::toupper(static_cast<unsigned char>(*end)));
    const int shift = unit == 'B' ? 0 : unit == 'M' ? 20 : unit == 'G' ? 30 : 10;
    if (end == text || (*end != '\0' && std::strchr("BKMG", unit) == nullptr)) return 0;
    if (number > (~0ULL >> shift)) return ~std::size_t{0};
    return static_cast<std::size_t>(number << shift);
  }
  return 0;
}

// Starts and joins one thread with the stack OMP_STACKSIZE asks for: where the system refuses it, libgomp
// would end the whole process (exit 1, "Thread creation failed") at the first parallel region with two
// threads. Returns why ("OMP_STACKSIZE=100G: ..."), or "" when the thread started or nothing is set.
std::string openmp_stack_refusal() {
  const char* variable = nullptr;
  const std::size_t bytes = openmp_stack_bytes(variable);
  if (bytes == 0) return "";
  pthread_attr_t attributes;
  ::pthread_attr_init(&attributes);
  int result = ::pthread_attr_setstacksize(&attributes, std::max<std::size_t>(bytes, PTHREAD_STACK_MIN));
  pthread_t thread{};
  if (result == 0)
    result = ::pthread_create(
        &thread, &attributes, [](void*) -> void* { return nullptr; }, nullptr);
  ::pthread_attr_destroy(&attributes);
  if (result == 0) {
    ::pthread_join(thread, nullptr);
    return "";
  }
  return std::string(variable) + "=" + std::getenv(variable) +
         ": a thread with that stack cannot start here (" + std::strerror(result) +
         "), and libgomp ends the process when it cannot start its threads; unset it or set it smaller "
         "(e.g. 8M) to use more";
}
}  // namespace

const OpenMpTeamLimit& openmp_team_limit() {
  static const OpenMpTeamLimit limit = [] {
    OpenMpTeamLimit found;
    const auto thread_limit = loaded_symbol<GetOpenMpThreads>("omp_get_thread_limit");
    const auto active_levels = loaded_symbol<GetOpenMpThreads>("omp_get_max_active_levels");
    const auto dynamic = loaded_symbol<GetOpenMpThreads>("omp_get_dynamic");
    const auto named = [](const char* variable) {
      const char* value = std::getenv(variable);
      return std::string(variable) + "=" + (value != nullptr ? value : "?");
    };
    std::string cause;
    if (std::string refused = openmp_stack_refusal(); !refused.empty()) {
      found.threads = 1;
      cause = std::move(refused);
    } else if (active_levels != nullptr && active_levels() == 0) {
      found.threads = 1;
      cause = named("OMP_MAX_ACTIVE_LEVELS") + " serialises every parallel region";
    } else if (dynamic != nullptr && dynamic() != 0) {
      found.threads = 1;
      cause = named("OMP_DYNAMIC") +
              " lets libgomp hand out fewer threads than LibTorch's oneDNN kernels split "
              "their work for (wrong results, hangs); unset it to use more";
    } else if (const int limit_threads = thread_limit != nullptr ? thread_limit() : 0;
               limit_threads > 0 && limit_threads < 1 << 16) {
      found.threads = limit_threads;
      cause = named("OMP_THREAD_LIMIT");
    }
    if (found.threads > 0)
      found.reason = cause + ": OpenMP capped at " + std::to_string(found.threads) + " thread(s)";
    return found;
  }();
  return limit;
}

int openmp_threads_allowed(int requested) {
  const int threads = std::max(1, requested);
  const OpenMpTeamLimit& limit = openmp_team_limit();
  return limit.threads > 0 ? std::min(threads, limit.threads) : threads;
}

void limit_openmp_to_team() {
  const OpenMpTeamLimit& limit = openmp_team_limit();
  if (limit.threads == 0) return;
  if (at::get_num_threads() > limit.threads) at::set_num_threads(limit.threads);
  if (limit.threads < read_cpu_limits().available_cpus) spdlog::warn("{}", limit.reason);
}

int caller_openmp_threads() {
  static const auto get_threads = loaded_symbol<GetOpenMpThreads>("omp_get_max_threads");
  return get_threads ? get_threads() : 1;
}

CallerOpenMpThreads::CallerOpenMpThreads(int threads) {
  static const auto set_threads = loaded_symbol<SetOpenMpThreads>("omp_set_num_threads");
  // LibTorch's lazy per-thread init runs now: on a thread's first parallel region it would put the pool's
  // count back over the one set here
  (void)at::get_num_threads();
  const int current = caller_openmp_threads();
  const int allowed = openmp_threads_allowed(threads);
  if (set_threads == nullptr || current == allowed) return;
  previous_ = current;
  set_threads(allowed);
}

CallerOpenMpThreads::~CallerOpenMpThreads() {
  static const auto set_threads = loaded_symbol<SetOpenMpThreads>("omp_set_num_threads");
  if (previous_ > 0) set_threads(previous_);
}

void set_caller_openmp_threads(int threads) {
  static const auto set_threads = loaded_symbol<SetOpenMpThreads>("omp_set_num_threads");
  (void)at::get_num_threads();  // LibTorch's lazy per-thread init runs now, not after the setting below
  if (set_threads != nullptr) set_threads(openmp_threads_allowed(threads));
}

int blas_thread_count() {
  static const auto get_threads = loaded_symbol<GetThreadsFunction>("openblas_get_num_threads");
  return get_threads ? get_threads() : -1;
}

}  // namespace ipj::device
