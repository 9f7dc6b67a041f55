// The cgroup task-limit check before kernels run (task_limit.hpp): fail with the limit named instead of
// hanging in a thread pool's start. Reads pids.max / pids.current through read_task_limit (machine_load).
#include "ipj/device/task_limit.hpp"

#include <unistd.h>

#include "ipj/core/error.hpp"
#include "ipj/device/machine_load.hpp"

namespace ipj::device {
namespace {

std::string describe(const TaskLimit& limit) {
  return "the cgroup's task limit is " + std::to_string(limit.max) + " (" + limit.file +
         ", every thread counts) with " + std::to_string(limit.current) + " in use";
}

constexpr const char* kHowToRaise =
    "raise it (docker run --pids-limit, Kubernetes podPidsLimit, systemd TasksMax)";

}  // namespace

void check_task_limit_for_threads() {
  const std::optional<TaskLimit> limit = read_task_limit();
  if (!limit || limit->spare() >= kMinimumSpareTasks) return;
  throw Error(ErrorCategory::runtime,
              describe(*limit) + ": ipj needs at least " + std::to_string(kMinimumSpareTasks) +
                  " more threads (its thread pools, data loading, the energy monitor) and would hang "
                  "starting them; " +
                  kHowToRaise + " by at least " + std::to_string(kMinimumSpareTasks - limit->spare()) +
                  "; a larger thread plan needs more (--threads 1 --prefetch 0 needs the fewest)");
}

void check_proc_is_mounted(const std::string& proc_root) {
  if (::access((proc_root + "/self/stat").c_str(), R_OK) == 0 &&
      ::access((proc_root + "/cpuinfo").c_str(), R_OK) == 0)
    return;
  throw Error(ErrorCategory::unsupported,
              proc_root + " is not mounted (cannot read " + proc_root +
                  "/cpuinfo): LibTorch reads the CPU topology from it to start its thread pool, and ipj "
                  "reads the CPU quota and load there; mount it (mount -t proc proc /proc; a container "
                  "gets it unless its runtime removes it) and run again");
}

std::string task_limit_hint() {
  const std::optional<TaskLimit> limit = read_task_limit();
  return limit ? "; " + describe(*limit) + ": " + kHowToRaise + ", or run with --threads 1 --prefetch 0" : "";
}

}  // namespace ipj::device
