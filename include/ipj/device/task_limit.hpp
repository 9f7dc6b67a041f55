// A cgroup task limit (pids.max: `docker run --pids-limit`, Kubernetes podPidsLimit, systemd TasksMax) met by
// ipj's threads: with one task left, LibTorch's thread-pool start hung for ever; with two, a later thread
// failed with a bare "Resource temporarily unavailable". Limits: cgroup accounting only (RLIMIT_NPROC not
// read). Also the /proc check (LibTorch cannot start its thread pool without /proc/cpuinfo).
#pragma once

#include <string>

namespace ipj::device {

// Tasks the smallest run needs beyond those at the check (measured on a 2-CPU machine, 3 tasks in use at the
// check: pids.max 3 hung, 4 failed starting a thread, 5 ran `--threads 1 --prefetch 0`, 6 the default plan).
inline constexpr long kMinimumSpareTasks = 2;

// Throws ipj::Error (runtime) naming the limit, its file and what to raise it to when fewer than
// kMinimumSpareTasks tasks are left; does nothing without a limit.
void check_task_limit_for_threads();

// Before kernels run: /proc must be mounted. LibTorch's thread pool reads the CPU topology from /proc/cpuinfo
// and, without it, stops the run with an internal enforce failure. Throws ipj::Error(unsupported) naming the
// fix.
void check_proc_is_mounted(const std::string& proc_root = "/proc");

// For a thread the system refused: "; the cgroup's task limit is N (FILE), M in use: raise it ...", or ""
// without a limit.
std::string task_limit_hint();

}  // namespace ipj::device
