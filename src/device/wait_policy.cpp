// OpenMP wait policy for a run: passive or a short spin, from the CPUs and the load at start
// (ipj/device/wait_policy.hpp). LibTorch-free: apps/ipj calls it before it starts itself again.
#include "ipj/device/wait_policy.hpp"

#include <sys/auxv.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ipj/core/environment.hpp"
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

const char* kBlasTimeout = "OPENBLAS_THREAD_TIMEOUT";
const char* kBlasMarker = "IPJ_BLAS_WAIT_SET";

WaitPolicyChoice passive(std::string reason) {
  return {false,
          {{"OMP_WAIT_POLICY", "PASSIVE"}, {kBlasTimeout, std::to_string(kPassiveBlasTimeout)}},
          std::move(reason)};
}

WaitPolicyChoice short_spin(std::string reason) {
  return {true,
          {{"GOMP_SPINCOUNT", std::to_string(kShortSpinCount)},
           {kBlasTimeout, std::to_string(kShortSpinBlasTimeout)}},
          std::move(reason)};
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

std::vector<std::pair<std::string, std::string>> environment_to_apply(const WaitPolicyChoice& choice) {
  std::vector<std::pair<std::string, std::string>> settings;
  for (const auto& setting : choice.environment) {
    if (setting.first != kBlasTimeout) {
      settings.push_back(setting);
    } else if (std::getenv(kBlasTimeout) == nullptr) {
      settings.push_back(setting);
      settings.emplace_back(kBlasMarker, "1");
    }
  }
  return settings;
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
  if (const char* spins = std::getenv("GOMP_SPINCOUNT")) {
    const bool no_spin = is_spin_count(spins) && std::strspn(spins, "0") == std::strlen(spins);
    return std::string(no_spin ? "sleep at once (no spin): " : "spin, then sleep: ") +
           "GOMP_SPINCOUNT=" + spins + (is_spin_count(spins) ? "" : kUnknownToLibgomp) + who;
  }
  return "unset (libgomp default: spin, then sleep)";
}

std::string blas_wait_description() {
  const char* timeout = std::getenv(kBlasTimeout);
  if (timeout == nullptr) return "unset (OpenBLAS default: yield for 2^28 cycles, ~0.1 s, then sleep)";
  const std::string who = std::getenv(kBlasMarker) != nullptr ? " (set by ipj)" : " (set by the user)";
  // Read as OpenBLAS 0.3.21 reads it: atoi(); 0 or less is its default, else clamped to 4..30.
  const int exponent = static_cast<int>(std::strtol(timeout, nullptr, 10));
  std::string shown = timeout;
  if (shown.size() > 40) shown = shown.substr(0, 40) + "...";
  std::string effect;
  if (exponent <= 0) {
    effect = "OpenBLAS reads no positive number here and runs its default, yield for 2^28 cycles, then sleep";
  } else {
    const int bounded = std::clamp(exponent, kPassiveBlasTimeout, 30);  // OpenBLAS's own bounds
    effect = bounded <= kPassiveBlasTimeout
                 ? "sleep at once"
                 : "yield for 2^" + std::to_string(bounded) + " cycles, then sleep";
  }
  return std::string(kBlasTimeout) + "=" + shown + ": " + effect + who;
}

bool wait_policy_set_by_environment() {
  return std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr;
}

bool second_start_disabled() {
  return environment_switch("IPJ_NO_REEXEC");
}

namespace {
std::string& skipped_second_start() {
  static std::string reason;
  return reason;
}
}  // namespace

void note_second_start_skipped(const std::string& reason) {
  skipped_second_start() = reason;
}

bool started_through_the_dynamic_loader() {
  return ::getauxval(AT_BASE) == 0;
}

std::string wait_policy_reason() {
  if (const char* reason = std::getenv("IPJ_WAIT_POLICY_SET")) return reason;
  if (!skipped_second_start().empty()) return skipped_second_start();
  if (wait_policy_set_by_environment())
    return "set before ipj started (by the user or a parent process): ipj leaves it as it is";
  if (second_start_disabled())
    return std::string("IPJ_NO_REEXEC=") + std::getenv("IPJ_NO_REEXEC") + ": libgomp's own default";
  return "";
}

std::vector<std::string> environment_without_ipj_wait_policy(char* const* environment) {
  const auto starts_with = [](const std::string& entry, const char* prefix) {
    return entry.rfind(prefix, 0) == 0;
  };
  std::vector<std::string> entries;
  bool omp_by_ipj = false, blas_by_ipj = false;
  for (char* const* entry = environment; entry != nullptr && *entry != nullptr; ++entry) {
    entries.emplace_back(*entry);
    omp_by_ipj = omp_by_ipj || starts_with(entries.back(), "IPJ_WAIT_POLICY_SET=");
    blas_by_ipj = blas_by_ipj || starts_with(entries.back(), "IPJ_BLAS_WAIT_SET=");
  }
  std::vector<std::string> kept;
  for (auto& entry : entries) {
    const bool omp_setting = starts_with(entry, "IPJ_WAIT_POLICY_SET=") ||
                             starts_with(entry, "OMP_WAIT_POLICY=") || starts_with(entry, "GOMP_SPINCOUNT=");
    const bool blas_setting =
        starts_with(entry, "IPJ_BLAS_WAIT_SET=") || starts_with(entry, "OPENBLAS_THREAD_TIMEOUT=");
    if (!(omp_by_ipj && omp_setting) && !(blas_by_ipj && blas_setting)) kept.push_back(std::move(entry));
  }
  return kept;
}

}  // namespace ipj::device
