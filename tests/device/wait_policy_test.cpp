// device::choose_wait_policy on synthetic loads (quiet, busy, one CPU, a server, the user's request) and the
// IPJ_WAIT_POLICY parser; the CLI side (the second start and results' threads) is in cli_test.cpp.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "ipj/core/error.hpp"
#include "ipj/device/wait_policy.hpp"

namespace ipj::device {
namespace {

LoadSample load_with_other(double other_cpus) {
  LoadSample sample;
  sample.other_cpus = other_cpus;
  sample.cpus = 2;
  sample.window_s = 0.1;
  return sample;
}

TEST(WaitPolicy, QuietMachineSpinsBrieflyBusyOrOneCpuOrServerSleeps) {
  const LoadSample quiet = load_with_other(0.12);
  const WaitPolicyChoice spin = choose_wait_policy(WaitPolicyRequest::automatic, false, 2, &quiet);
  EXPECT_TRUE(spin.short_spin);
  using Settings = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(spin.environment, (Settings{{"GOMP_SPINCOUNT", "3000"}, {"OPENBLAS_THREAD_TIMEOUT", "18"}}));
  EXPECT_NE(spin.reason.find("0.12 CPU(s) of other work at start (quiet)"), std::string::npos) << spin.reason;

  const LoadSample busy = load_with_other(kBusyOtherCpus);  // the threshold itself counts as busy
  const WaitPolicyChoice sleep = choose_wait_policy(WaitPolicyRequest::automatic, false, 2, &busy);
  EXPECT_FALSE(sleep.short_spin);
  EXPECT_EQ(sleep.environment, (Settings{{"OMP_WAIT_POLICY", "PASSIVE"}, {"OPENBLAS_THREAD_TIMEOUT", "4"}}));
  EXPECT_NE(sleep.reason.find("0.50 CPU(s) of other work at start"), std::string::npos) << sleep.reason;

  EXPECT_FALSE(choose_wait_policy(WaitPolicyRequest::automatic, false, 1, &quiet).short_spin);
  EXPECT_FALSE(choose_wait_policy(WaitPolicyRequest::automatic, true, 2, &quiet).short_spin);
  EXPECT_FALSE(choose_wait_policy(WaitPolicyRequest::automatic, false, 2, nullptr).short_spin);
}

TEST(WaitPolicy, TheUsersRequestWinsAndBadTextNamesTheVariable) {
  const LoadSample busy = load_with_other(1.5);
  const WaitPolicyChoice spin = choose_wait_policy(WaitPolicyRequest::short_spin, true, 1, &busy);
  EXPECT_TRUE(spin.short_spin);
  EXPECT_EQ(spin.reason, "IPJ_WAIT_POLICY=short-spin");
  const LoadSample quiet = load_with_other(0.0);
  EXPECT_FALSE(choose_wait_policy(WaitPolicyRequest::passive, false, 2, &quiet).short_spin);

  EXPECT_EQ(parse_wait_policy_request(""), WaitPolicyRequest::automatic);
  EXPECT_EQ(parse_wait_policy_request("auto"), WaitPolicyRequest::automatic);
  EXPECT_EQ(parse_wait_policy_request("passive"), WaitPolicyRequest::passive);
  EXPECT_EQ(parse_wait_policy_request("short-spin"), WaitPolicyRequest::short_spin);
  try {
    parse_wait_policy_request("spin");
    FAIL() << "accepted 'spin'";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::usage);
    EXPECT_NE(std::string(error.what()).find("IPJ_WAIT_POLICY='spin'"), std::string::npos) << error.what();
  }
}

// OpenBLAS's timeout: ipj's unless the user set one (theirs runs, and the results say whose it is).
TEST(WaitPolicy, TheUsersOpenBlasTimeoutStaysAndTheResultsSayWhoseItIs) {
  const LoadSample quiet = load_with_other(0.0);
  const WaitPolicyChoice spin = choose_wait_policy(WaitPolicyRequest::automatic, false, 2, &quiet);
  using Settings = std::vector<std::pair<std::string, std::string>>;
  ::unsetenv("OPENBLAS_THREAD_TIMEOUT");
  ::unsetenv("IPJ_BLAS_WAIT_SET");
  EXPECT_EQ(blas_wait_description(), "unset (OpenBLAS default: yield for 2^28 cycles, ~0.1 s, then sleep)");
  EXPECT_EQ(
      environment_to_apply(spin),
      (Settings{{"GOMP_SPINCOUNT", "3000"}, {"OPENBLAS_THREAD_TIMEOUT", "18"}, {"IPJ_BLAS_WAIT_SET", "1"}}));
  ::setenv("OPENBLAS_THREAD_TIMEOUT", "18", 1);
  ::setenv("IPJ_BLAS_WAIT_SET", "1", 1);
  EXPECT_EQ(blas_wait_description(),
            "OPENBLAS_THREAD_TIMEOUT=18: yield for 2^18 cycles, then sleep (set by ipj)");
  ::unsetenv("IPJ_BLAS_WAIT_SET");
  ::setenv("OPENBLAS_THREAD_TIMEOUT", "2", 1);  // OpenBLAS raises it to its minimum, 4
  EXPECT_EQ(environment_to_apply(spin), (Settings{{"GOMP_SPINCOUNT", "3000"}}));
  EXPECT_EQ(blas_wait_description(), "OPENBLAS_THREAD_TIMEOUT=2: sleep at once (set by the user)");
  // Read as OpenBLAS reads it (atoi; <= 0: its default; clamped to 4..30).
  ::setenv("OPENBLAS_THREAD_TIMEOUT", "soon", 1);
  EXPECT_EQ(
      blas_wait_description(),
      "OPENBLAS_THREAD_TIMEOUT=soon: OpenBLAS reads no positive number here and runs its default, yield "
      "for 2^28 cycles, then sleep (set by the user)");
  ::setenv("OPENBLAS_THREAD_TIMEOUT", "0", 1);
  EXPECT_NE(blas_wait_description().find("runs its default"), std::string::npos);
  ::setenv("OPENBLAS_THREAD_TIMEOUT", "100", 1);
  EXPECT_EQ(blas_wait_description(),
            "OPENBLAS_THREAD_TIMEOUT=100: yield for 2^30 cycles, then sleep (set by the user)");
  ::setenv("OPENBLAS_THREAD_TIMEOUT", "5abc", 1);
  EXPECT_EQ(blas_wait_description(),
            "OPENBLAS_THREAD_TIMEOUT=5abc: yield for 2^5 cycles, then sleep (set by the user)");
  ::unsetenv("OPENBLAS_THREAD_TIMEOUT");
}

TEST(WaitPolicy, ChildrenThatAreNotIpjGetTheUsersSettingsBack) {
  std::vector<std::string> set_by_ipj{"PATH=/usr/bin", "OMP_WAIT_POLICY=PASSIVE", "GOMP_SPINCOUNT=3000",
                                      "IPJ_WAIT_POLICY_SET=quiet", "OMP_NUM_THREADS=2"};
  std::vector<char*> pointers;
  for (auto& entry : set_by_ipj)
    pointers.push_back(entry.data());
  pointers.push_back(nullptr);
  EXPECT_EQ(environment_without_ipj_wait_policy(pointers.data()),
            (std::vector<std::string>{"PATH=/usr/bin", "OMP_NUM_THREADS=2"}));
  // Set by the user (no marker): kept as they are.
  pointers.erase(pointers.begin() + 3);
  EXPECT_EQ(environment_without_ipj_wait_policy(pointers.data()),
            (std::vector<std::string>{"PATH=/usr/bin", "OMP_WAIT_POLICY=PASSIVE", "GOMP_SPINCOUNT=3000",
                                      "OMP_NUM_THREADS=2"}));
  // OpenBLAS's timeout: dropped with its marker when ipj set it, the user's kept.
  std::vector<std::string> blas{"OPENBLAS_THREAD_TIMEOUT=4", "IPJ_BLAS_WAIT_SET=1", "HOME=/root"};
  std::vector<char*> blas_pointers{blas[0].data(), blas[1].data(), blas[2].data(), nullptr};
  EXPECT_EQ(environment_without_ipj_wait_policy(blas_pointers.data()),
            (std::vector<std::string>{"HOME=/root"}));
  blas_pointers.erase(blas_pointers.begin() + 1);
  EXPECT_EQ(environment_without_ipj_wait_policy(blas_pointers.data()),
            (std::vector<std::string>{"OPENBLAS_THREAD_TIMEOUT=4", "HOME=/root"}));
}

}  // namespace
}  // namespace ipj::device
