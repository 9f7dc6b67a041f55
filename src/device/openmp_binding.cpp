// Undoing libgomp's start-up binding for the threads it does not manage: with OMP_PROC_BIND set, the initial
// thread and every thread it starts run on place 0 (one CPU under OMP_PLACES=cores), so OpenBLAS's pool and
// ipj's own threads share it. Limits: reads libgomp's places through dlsym; other OpenMP runtimes are left
// alone.
#include "ipj/device/openmp_binding.hpp"
#include "loaded_symbol.hpp"

#include <dirent.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <set>
#include <string>

namespace ipj::device {
namespace {

using IntQuery = int (*)();
using IntOfInt = int (*)(int);
using PlaceIds = void (*)(int, int*);

std::vector<int> cpus_of(const cpu_set_t& set) {
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

// The places libgomp parsed from OMP_PLACES (or made itself), each a list of CPU ids; empty when unbound.
std::vector<std::vector<int>> openmp_places() {
  const auto proc_bind = loaded_symbol<IntQuery>("omp_get_proc_bind");
  const auto num_places = loaded_symbol<IntQuery>("omp_get_num_places");
  const auto place_num_procs = loaded_symbol<IntOfInt>("omp_get_place_num_procs");
  const auto place_proc_ids = loaded_symbol<PlaceIds>("omp_get_place_proc_ids");
  std::vector<std::vector<int>> places;
  if (!proc_bind || !num_places || !place_num_procs || !place_proc_ids || proc_bind() == 0) return places;
  for (int place = 0; place < num_places(); ++place) {
    std::vector<int> ids(static_cast<std::size_t>(std::max(0, place_num_procs(place))));
    if (!ids.empty()) place_proc_ids(place, ids.data());
    places.push_back(ids);
  }
  return places;
}

std::vector<int> process_thread_ids() {
  std::vector<int> ids;
  if (DIR* tasks = ::opendir("/proc/self/task")) {
    while (const dirent* entry = ::readdir(tasks))
      if (const int id = std::atoi(entry->d_name); id > 0) ids.push_back(id);
    ::closedir(tasks);
  }
  return ids;
}

// The variables that asked for the binding, as the user wrote them: OMP_PROC_BIND and GOMP_CPU_AFFINITY, else
// OMP_PLACES (binding without OMP_PROC_BIND); OMP_PLACES's places are then given as libgomp parsed them (an
// invalid OMP_PLACES falls back to libgomp's default places, which its own warning says).
std::string binding_setting() {
  std::string text;
  for (const char* name : {"OMP_PROC_BIND", "GOMP_CPU_AFFINITY"})
    if (const char* value = std::getenv(name))
      text += (text.empty() ? "" : " ") + std::string(name) + "=" + value;
  if (const char* places = std::getenv("OMP_PLACES"); text.empty() && places != nullptr)
    text = std::string("OMP_PLACES=") + places;
  return text.empty() ? "OpenMP binding" : text;
}

std::string places_text(const std::vector<std::vector<int>>& places) {
  std::string text;
  for (const auto& place : places)
    text += (text.empty() ? "{" : ",{") + cpu_list_text(place) + "}";
  return text;
}

std::string widened_reason(const OpenMpBindingWidening& widening, const std::string& places) {
  return binding_setting() + " (libgomp's places " + places + ") bound the main thread to CPU(s) " +
         cpu_list_text(widening.bound_cpus) +
         " (the first place), and the threads OpenMP does not manage (OpenBLAS, data loading, serving) "
         "inherit that; ipj moved " +
         std::to_string(widening.threads_widened) + " thread(s) to CPU(s) " +
         cpu_list_text(widening.place_cpus) +
         " (all the places): OpenMP's worker threads keep their places, the main thread (OpenMP thread 0) "
         "runs on all of them";
}

OpenMpBindingWidening widen_now() {
  OpenMpBindingWidening widening;
  cpu_set_t bound;
  CPU_ZERO(&bound);
  if (::sched_getaffinity(0, sizeof(bound), &bound) != 0) return widening;
  widening.bound_cpus = cpus_of(bound);
  const std::vector<std::vector<int>> places = openmp_places();
  if (places.empty()) return widening;
  const std::vector<int> wider = cpus_to_widen_to(widening.bound_cpus, places);
  if (wider.empty()) {
    // Nothing to widen: the places hold no other CPU. Say so where they leave fewer CPUs than are online.
    const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
    if (online > static_cast<long>(widening.bound_cpus.size()))
      widening.reason = binding_setting() + " (libgomp's places " + places_text(places) +
                        ") keeps ipj on CPU(s) " + cpu_list_text(widening.bound_cpus) + " of " +
                        std::to_string(online) + " online";
    return widening;
  }
  cpu_set_t target;
  CPU_ZERO(&target);
  for (int cpu : wider)
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &target);
  for (int thread : process_thread_ids())
    if (::sched_setaffinity(thread, sizeof(target), &target) == 0) ++widening.threads_widened;
  if (widening.threads_widened == 0) return widening;
  widening.place_cpus = wider;
  widening.reason = widened_reason(widening, places_text(places));
  return widening;
}

}  // namespace

std::vector<int> cpus_to_widen_to(const std::vector<int>& bound_cpus,
                                  const std::vector<std::vector<int>>& places) {
  std::set<int> all;
  for (const auto& place : places)
    all.insert(place.begin(), place.end());
  const std::set<int> bound(bound_cpus.begin(), bound_cpus.end());
  const bool wider = std::any_of(all.begin(), all.end(), [&](int cpu) { return bound.count(cpu) == 0; });
  return wider ? std::vector<int>(all.begin(), all.end()) : std::vector<int>{};
}

std::string cpu_list_text(const std::vector<int>& cpus) {
  const std::set<int> sorted(cpus.begin(), cpus.end());
  std::string text;
  for (auto it = sorted.begin(); it != sorted.end();) {
    const int first = *it;
    int last = first;
    while (++it != sorted.end() && *it == last + 1)
      last = *it;
    text += (text.empty() ? "" : ",") + std::to_string(first) +
            (last > first ? "-" + std::to_string(last) : std::string());
  }
  return text;
}

const OpenMpBindingWidening& widen_threads_bound_by_openmp() {
  static const OpenMpBindingWidening widening = widen_now();
  return widening;
}

}  // namespace ipj::device
