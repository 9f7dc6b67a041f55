// OpenMP wait policy for a run: passive or a short spin, from the CPUs and the load at start
// (ipj/device/wait_policy.hpp). LibTorch-free: apps/ipj calls it before it starts itself again.
#include "ipj/device/wait_policy.hpp"

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ipj/core/error.hpp"
#include "ipj/core/number_format.hpp"

namespace ipj::device {

WaitPolicyRequest parse_wait_policy_request(const std::string& text) {
  if (text.empty() || text == "auto") return WaitPolicyRequest::automatic;
  if (text == "passive") return WaitPolicyRequest::passive;
  if (text == "short-spin") return WaitPolicyRequest::short_spin;
  const std::string shown = text.size() > 40 ? text.substr(0, 40) + "..." : text;
  fail(ErrorCategory::usage,
       "IPJ_WAIT_POLICY='" + shown + "' is not a wait policy: use auto (the default), passive or short-spin");
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

namespace {

bool equals_ignoring_case(std::string text, const std::string& lower) {
  for (char& c : text)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text == lower;
}

// libgomp's GOMP_SPINCOUNT: a whole number with an optional k/M/G/T suffix, or "infinite"/"infinity".
bool is_spin_count(const std::string& text) {
  if (equals_ignoring_case(text, "infinite") || equals_ignoring_case(text, "infinity")) return true;
  std::size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits])))
    ++digits;
  if (digits == 0) return false;
  return digits == text.size() ||
         (digits + 1 == text.size() && std::strchr("kKmMgGtT", text[digits]) != nullptr);
}

const char* kUnknownToLibgomp = " (not a value libgomp knows: it runs its default, spin then sleep)";

}  // namespace

std::string omp_wait_policy_description() {
  const std::string who =
      std::getenv("IPJ_WAIT_POLICY_SET") != nullptr ? " (set by ipj)" : " (set by the user)";
  if (const char* policy = std::getenv("OMP_WAIT_POLICY")) {
    const bool known = equals_ignoring_case(policy, "active") || equals_ignoring_case(policy, "passive");
    return std::string(policy) + (known ? "" : kUnknownToLibgomp) + who;
  }
  if (const char* spins = std::getenv("GOMP_SPINCOUNT"))
    return "spin, then sleep: GOMP_SPINCOUNT=" + std::string(spins) +
           (is_spin_count(spins) ? "" : kUnknownToLibgomp) + who;
  return "unset (libgomp default: spin, then sleep)";
}

bool wait_policy_set_by_environment() {
  return std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr;
}

bool second_start_disabled() {
  const char* no_reexec = std::getenv("IPJ_NO_REEXEC");
  return no_reexec != nullptr && std::string(no_reexec) == "1";
}

std::string wait_policy_reason() {
  if (const char* reason = std::getenv("IPJ_WAIT_POLICY_SET")) return reason;
  if (wait_policy_set_by_environment())
    return "set before ipj started (by the user or a parent process): ipj leaves it as it is";
  if (second_start_disabled()) return "IPJ_NO_REEXEC=1: libgomp's own default";
  return "";
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
