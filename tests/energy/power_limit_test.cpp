// GPU power-limit safety on the fake NVML library: set and restore in process, restore on SIGTERM/SIGINT in a
// real process (the limit back, the restore file gone), and after SIGKILL from the restore file.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ipj/core/atomic_file.hpp"
#include "ipj/core/error.hpp"
#include "ipj/energy/power_limit.hpp"
#include "support/test_support.hpp"

extern char** environ;

namespace ipj::energy {
namespace {

// The limit the fake library holds for GPU 0: its last "limit_mw 0 V" line (300000 when never set).
long last_limit_mw(const std::string& state_path) {
  std::istringstream lines(read_file(state_path));
  std::string line;
  long limit = 300000;
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string key;
    unsigned index = 0;
    long value = 0;
    if (fields >> key >> index >> value && key == "limit_mw" && index == 0) limit = value;
  }
  return limit;
}

struct Holder {
  pid_t pid = -1;
  std::string first_line;
};

// Starts tests/energy/power_limit_holder.cpp and waits (up to 20 s) for its "ready W" line.
Holder start_holder(const std::string& state_path, const std::string& restore_file, const char* fraction) {
  int pipe_fds[2];
  EXPECT_EQ(::pipe(pipe_fds), 0);
  std::vector<std::string> environment = {"FAKE_NVML_STATE=" + state_path};
  for (char** entry = environ; *entry != nullptr; ++entry)
    if (std::string(*entry).rfind("CUDA_VISIBLE_DEVICES=", 0) != 0 &&
        std::string(*entry).rfind("FAKE_NVML_STATE=", 0) != 0)
      environment.push_back(*entry);
  std::vector<char*> envp;
  for (auto& entry : environment)
    envp.push_back(entry.data());
  envp.push_back(nullptr);
  std::string binary = IPJ_POWER_LIMIT_HOLDER, library = IPJ_FAKE_NVML, restore = restore_file;
  std::string share = fraction;
  char* argv[] = {binary.data(), library.data(), restore.data(), share.data(), nullptr};
  Holder holder;
  holder.pid = ::fork();
  if (holder.pid == 0) {  // only async-signal-safe calls until exec
    ::dup2(pipe_fds[1], 1);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    ::execve(argv[0], argv, envp.data());
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  pollfd ready{pipe_fds[0], POLLIN, 0};
  char buffer[64] = {};
  if (::poll(&ready, 1, 20000) == 1) {
    const ssize_t count = ::read(pipe_fds[0], buffer, sizeof buffer - 1);
    if (count > 0) holder.first_line.assign(buffer, static_cast<size_t>(count));
  }
  ::close(pipe_fds[0]);
  return holder;
}

int wait_for_signal(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFSIGNALED(status) ? WTERMSIG(status) : -1;
}

class PowerLimit : public ::testing::Test {
 protected:
  void SetUp() override {
    state_path_ = dir_.file("nvml-state");
    write_file_atomically(state_path_, "count 1\nname 0 Fake H100\n");
    ::setenv("FAKE_NVML_STATE", state_path_.c_str(), 1);
    ::unsetenv("CUDA_VISIBLE_DEVICES");
  }
  testing::TempDir dir_;
  std::string state_path_;
};

}  // namespace

TEST_F(PowerLimit, SetsFractionsOfTheDefaultAndRestoresOnDestruction) {
  const std::string restore_file = dir_.file("restore.json");
  {
    PowerLimitControl control(IPJ_FAKE_NVML, "cuda", restore_file);
    EXPECT_EQ(control.limits().name, "Fake H100");
    EXPECT_DOUBLE_EQ(control.limits().original_w, 300.0);
    EXPECT_DOUBLE_EQ(control.limits().min_w, 100.0);
    EXPECT_DOUBLE_EQ(control.limits().max_w, 400.0);
    EXPECT_TRUE(std::filesystem::exists(restore_file));  // written before any change
    EXPECT_DOUBLE_EQ(control.set_fraction(0.7), 210.0);
    EXPECT_EQ(last_limit_mw(state_path_), 210000);
    EXPECT_DOUBLE_EQ(control.set_fraction(0.2), 100.0);  // clamped to the board's minimum
    EXPECT_EQ(last_limit_mw(state_path_), 100000);
  }
  EXPECT_EQ(last_limit_mw(state_path_), 300000);
  EXPECT_FALSE(std::filesystem::exists(restore_file));
}

TEST_F(PowerLimit, RefusalIsAClearErrorAndNothingChanges) {
  std::ofstream(state_path_, std::ios::app) << "set_fail 1\n";
  PowerLimitControl control(IPJ_FAKE_NVML, "cuda", dir_.file("restore.json"));
  try {
    control.set_fraction(0.5);
    FAIL() << "NVML refused: must throw";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::unsupported);
    EXPECT_NE(std::string(error.what()).find("Insufficient Permissions"), std::string::npos) << error.what();
  }
  EXPECT_EQ(last_limit_mw(state_path_), 300000);
  try {
    PowerLimitControl missing("/nonexistent/libnvidia-ml.so.1", "cuda", dir_.file("other.json"));
    FAIL() << "no NVML: must throw";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::unsupported);
  }
}

TEST_F(PowerLimit, SigtermAndSigintRestoreTheLimit) {
  for (int signal_number : {SIGTERM, SIGINT}) {
    const std::string restore_file = dir_.file("restore-" + std::to_string(signal_number) + ".json");
    const Holder holder = start_holder(state_path_, restore_file, "0.6");
    ASSERT_EQ(holder.first_line, "ready 180\n");
    EXPECT_EQ(last_limit_mw(state_path_), 180000);
    ::kill(holder.pid, signal_number);
    EXPECT_EQ(wait_for_signal(holder.pid), signal_number);  // it still dies of the signal
    EXPECT_EQ(last_limit_mw(state_path_), 300000) << signal_number;
    EXPECT_FALSE(std::filesystem::exists(restore_file)) << signal_number;
  }
}

TEST_F(PowerLimit, AfterSigkillTheRestoreFileBringsTheLimitBack) {
  const std::string restore_file = dir_.file("restore.json");
  const Holder holder = start_holder(state_path_, restore_file, "0.5");
  ASSERT_EQ(holder.first_line, "ready 150\n");
  ::kill(holder.pid, SIGKILL);
  EXPECT_EQ(wait_for_signal(holder.pid), SIGKILL);
  EXPECT_EQ(last_limit_mw(state_path_), 150000);  // nothing can run on SIGKILL
  ASSERT_TRUE(std::filesystem::exists(restore_file));
  EXPECT_NE(describe_restore_file(restore_file).find("300 W"), std::string::npos);
  const std::string restored = restore_power_limit_from_file(IPJ_FAKE_NVML, restore_file);
  EXPECT_NE(restored.find("300 W"), std::string::npos) << restored;
  EXPECT_EQ(last_limit_mw(state_path_), 300000);
  EXPECT_FALSE(std::filesystem::exists(restore_file));
  EXPECT_EQ(restore_power_limit_from_file(IPJ_FAKE_NVML, restore_file), "");
}

}  // namespace ipj::energy
