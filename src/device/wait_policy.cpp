// OpenMP wait policy for a run: passive or a short spin, from the CPUs and the load at start
// (ipj/device/wait_policy.hpp). LibTorch-free: apps/ipj calls it before it starts itself again.
#include "ipj/device/wait_policy.hpp"

#include <cstdlib>
#include <string>

#include "ipj/core/error.hpp"
#include "ipj/core/number_format.hpp"

namespace ipj::device {

WaitPolicyRequest parse_wait_policy_request(const std::string& text) {
  if (text.empty() || text == "auto") return WaitPolicyRequest::automatic;
  if (text == "passive") return WaitPolicyRequest::passive;
  if (text == "short-spin") return WaitPolicyRequest::short_spin;
  fail(ErrorCategory::usage,
       "IPJ_WAIT_POLICY='" + text + "' is not a wait policy: use auto (the default), passive or short-spin");
}

namespace {

WaitPolicyChoice passive(std::string reason) {
  return {false, {{"OMP_WAIT_POLICY", "PASSIVE"}}, std::move(reason)};
}

WaitPolicyChoice short_spin(std::string reason) {
  return {true, {{"GOMP_SPINCOUNT", std::to_string(kShortSpinCount)}}, std::move(reason)};
}

}  // namespace

WaitPolicyChoice choose_wait_policy(WaitPolicyRequest request, bool long_running, int available_cpus,
                                    const LoadSample* load) {
  if (request == WaitPolicyRequest::passive) return passive("IPJ_WAIT_POLICY=passive");
  if (request == WaitPolicyRequest::short_spin) return short_spin("IPJ_WAIT_POLICY=short-spin");
  if (long_running) return passive("a server runs while neighbours come and go: idle threads sleep at once");
  if (available_cpus < 2) return passive("1 CPU available: no second thread to wait for");
  if (load == nullptr) return passive("the load at start was not sampled");
  const std::string other = format_number("%.2f", load->other_cpus) + " CPU(s) of other work at start";
  if (is_busy(*load)) return passive(other + ": idle threads sleep at once, leaving the CPUs to it");
  return short_spin(other +
                    " (quiet): idle threads spin briefly so that the next parallel region starts "
                    "without a wake-up");
}

std::string omp_wait_policy_description() {
  const char* set_by_ipj = std::getenv("IPJ_WAIT_POLICY_SET");
  const std::string who = set_by_ipj != nullptr ? " (set by ipj)" : " (set by the user)";
  if (const char* policy = std::getenv("OMP_WAIT_POLICY")) return std::string(policy) + who;
  if (const char* spins = std::getenv("GOMP_SPINCOUNT"))
    return "spin, then sleep: GOMP_SPINCOUNT=" + std::string(spins) + who;
  return "unset (libgomp default: spin, then sleep)";
}

std::string wait_policy_reason() {
  const char* reason = std::getenv("IPJ_WAIT_POLICY_SET");
  return reason != nullptr ? reason : "";
}

std::vector<std::string> environment_without_ipj_wait_policy(char* const* environment) {
  std::vector<std::string> entries;
  bool set_by_ipj = false;
  for (char* const* entry = environment; entry != nullptr && *entry != nullptr; ++entry) {
    entries.emplace_back(*entry);
    set_by_ipj = set_by_ipj || entries.back().rfind("IPJ_WAIT_POLICY_SET=", 0) == 0;
  }
  if (!set_by_ipj) return entries;
  std::vector<std::string> kept;
  for (auto& entry : entries) {
    const bool ipj_setting = entry.rfind("IPJ_WAIT_POLICY_SET=", 0) == 0 ||
                             entry.rfind("OMP_WAIT_POLICY=", 0) == 0 ||
                             entry.rfind("GOMP_SPINCOUNT=", 0) == 0;
    if (!ipj_setting) kept.push_back(std::move(entry));
  }
  return kept;
}

}  // namespace ipj::device
