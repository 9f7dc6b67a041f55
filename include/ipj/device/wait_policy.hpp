// How idle worker threads wait, chosen before LibTorch's libgomp and OpenBLAS are loaded (they read their
// settings once, at load): passive (sleep at once) or a short spin (GOMP_SPINCOUNT=kShortSpinCount and
// OPENBLAS_THREAD_TIMEOUT=kShortSpinBlasTimeout, ~0.1 ms each, then sleep). LibTorch-free. Limit: chosen from
// the load at start (training re-plans its pools later: thread_replan.hpp).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "ipj/device/machine_load.hpp"

namespace ipj::device {

// IPJ_WAIT_POLICY: auto (default), passive or short-spin.
enum class WaitPolicyRequest { automatic, passive, short_spin };
// "auto" | "passive" | "short-spin" ("" = auto); throws ipj::Error(usage) naming IPJ_WAIT_POLICY otherwise.
WaitPolicyRequest parse_wait_policy_request(const std::string& text);

// Spins of libgomp's wait loop before a worker sleeps (its default is 300,000: milliseconds of spinning).
inline constexpr int kShortSpinCount = 3000;
// OpenBLAS's workers (LibTorch's fp32 GEMMs) call sched_yield in a loop for 2^OPENBLAS_THREAD_TIMEOUT cycles
// after each call before they sleep (default 28: ~0.1 s, also at every start, where they have nothing to do).
inline constexpr int kPassiveBlasTimeout = 4;     // OpenBLAS's minimum: 16 cycles, sleep at once
inline constexpr int kShortSpinBlasTimeout = 18;  // ~0.1 ms at 2.5 GHz, like the short OpenMP spin

struct WaitPolicyChoice {
  bool short_spin = false;
  // to set before libgomp and OpenBLAS load (an OPENBLAS_THREAD_TIMEOUT the user set stays theirs:
  // environment_to_apply)
  std::vector<std::pair<std::string, std::string>> environment;
  std::string reason;  // why, for results' threads.wait_policy_reason
};

// What the machine offers at start: the CPUs this process may use and, for `auto`, the load sampled just
// before (nullptr: not sampled). `long_running`: a server, whose neighbours come and go (always passive).
// auto: a short spin on a quiet machine with >= 2 CPUs; passive when busy (other work >= kBusyOtherCpus),
// on one CPU, or for a server. Spinning lets the next parallel region start without a futex wake-up
// (measured +10-45% samples/s in bf16 training on a quiet 2-CPU machine); beside a busy neighbour a spinning
// pool loses (up to 3x), which is why the load decides.
WaitPolicyChoice choose_wait_policy(WaitPolicyRequest request, bool long_running, int available_cpus,
                                    const LoadSample* load);

// The settings of `choice` for the second start, with the marker IPJ_BLAS_WAIT_SET=1 when ipj sets
// OPENBLAS_THREAD_TIMEOUT: all of them except an OPENBLAS_THREAD_TIMEOUT already in the environment (the
// user's runs).
std::vector<std::pair<std::string, std::string>> environment_to_apply(const WaitPolicyChoice& choice);

// OMP_WAIT_POLICY or GOMP_SPINCOUNT is set (by the user or a parent process): ipj leaves it as it is.
bool wait_policy_set_by_environment();
// IPJ_NO_REEXEC=1: no second start, libgomp's own default.
bool second_start_disabled();

// The program was started through the dynamic loader (`ld-linux-x86-64.so.2 ipj train ...`): /proc/self/exe
// is then the loader, and executing it again with ipj's arguments fails. The kernel loaded no interpreter
// for it (AT_BASE is 0), as for every dynamically linked program started the usual way it does.
bool started_through_the_dynamic_loader();
// The second start could not run (the reason goes into results' threads.wait_policy_reason).
void note_second_start_skipped(const std::string& reason);

// What libgomp runs with in this process, for results: "PASSIVE (set by ipj)", "spin, then sleep:
// GOMP_SPINCOUNT=3000 (set by ipj)", "ACTIVE (set by the user)", "unset (libgomp default: spin, then sleep)".
// IPJ_WAIT_POLICY_SET holds ipj's reason when ipj set it.
std::string omp_wait_policy_description();
// How OpenBLAS's workers wait in this process, for results' threads.blas_wait: "OPENBLAS_THREAD_TIMEOUT=4:
// sleep at once (set by ipj)", "OPENBLAS_THREAD_TIMEOUT=18: yield for 2^18 cycles, then sleep (set by the
// user)", "unset (OpenBLAS default: yield for 2^28 cycles, ~0.1 s, then sleep)".
std::string blas_wait_description();
// Why this policy runs: the reason ipj gave when it chose it, "set before ipj started ..." when the user (or
// a parent process) set OMP_WAIT_POLICY / GOMP_SPINCOUNT, "IPJ_NO_REEXEC=1: ..." when the second start was
// off.
std::string wait_policy_reason();

// `environment` ("NAME=VALUE" entries, null-terminated like `environ`) without the wait settings ipj set for
// itself (OMP_WAIT_POLICY / GOMP_SPINCOUNT when IPJ_WAIT_POLICY_SET is present, OPENBLAS_THREAD_TIMEOUT when
// IPJ_BLAS_WAIT_SET is, and those markers): what a
// child that is not ipj (the seeds' Python loop) runs with, so that it gets the user's settings, not ipj's.
std::vector<std::string> environment_without_ipj_wait_policy(char* const* environment);

}  // namespace ipj::device
