// OpenMP binding (OMP_PROC_BIND, OMP_PLACES, GOMP_CPU_AFFINITY): libgomp pins the initial thread to its first
// place when it loads, and every thread started afterwards (OpenBLAS's pool, data loading, the server)
// inherits that one place. Limits: libgomp only (read through dlsym); OpenMP's own workers keep the places it
// gives them.
#pragma once

#include <string>
#include <vector>

namespace ipj::device {

struct OpenMpBindingWidening {
  std::vector<int> bound_cpus;  // the initial thread's CPUs as libgomp left them
  std::vector<int> place_cpus;  // every CPU in OMP places: where the user's binding spreads the team
  int threads_widened = 0;      // threads of this process moved from bound_cpus to place_cpus
  // What was done and why; or, where the places leave fewer CPUs than are online, which setting keeps ipj on
  // them; empty when binding is off or changes nothing
  std::string reason;
};

// The CPUs to widen a bound thread to: the union of the places when it holds CPUs the thread lacks, else
// empty.
std::vector<int> cpus_to_widen_to(const std::vector<int>& bound_cpus,
                                  const std::vector<std::vector<int>>& places);

// "0-3,6": a CPU list as taskset and /proc print it (cpus sorted, no duplicates)
std::string cpu_list_text(const std::vector<int>& cpus);

// Once per process (later calls return the first answer): when libgomp bound the initial thread to fewer CPUs
// than its places hold, moves every thread of the process to the places' CPUs. Call before starting threads.
// Limit: GOMP_CPU_AFFINITY's CPUs are taken as listed, as libgomp itself takes them for the main thread, also
// outside a `taskset` mask (the mask from before libgomp's start-up binding is not readable afterwards).
const OpenMpBindingWidening& widen_threads_bound_by_openmp();

}  // namespace ipj::device
