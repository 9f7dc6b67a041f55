// posix_spawnp + a reaping loop under an EnergyMonitor window. ipj is a child subreaper for the duration, so
// orphaned descendants become its children; the loop reaps them all, forwards SIGINT/SIGTERM/SIGHUP to the
// tree (found through /proc), and wakes on a self-pipe written by the signal handlers. Linux only.
#include "ipj/energy/command_runner.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include "ipj/core/error.hpp"
#include "ipj/energy/energy_monitor.hpp"

extern char** environ;

namespace ipj::energy {
namespace {

constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP};

// What the signal handlers record (async-signal-safe: lock-free atomics and write(2) only).
std::atomic<unsigned> pending_signals{0};        // bit N: signal N arrived (sent by a process)
std::atomic<unsigned> pending_from_terminal{0};  // bit N: signal N came from the terminal (SI_KERNEL)
int wake_pipe[2] = {-1, -1};

void on_signal(int signal_number, siginfo_t* info, void*) {
  const int saved_errno = errno;
  if (signal_number != SIGCHLD) {
    const unsigned bit = 1u << signal_number;
    if (info != nullptr && info->si_code == SI_KERNEL)
      pending_from_terminal.fetch_or(bit);
    else
      pending_signals.fetch_or(bit);
  }
  if (wake_pipe[1] >= 0) {
    [[maybe_unused]] const ssize_t written = ::write(wake_pipe[1], "x", 1);
  }
  errno = saved_errno;
}

// Installs the handlers (leaving signals that were ignored at start ignored, as a shell would) and the
// self-pipe; restores everything on destruction.
class SignalForwarding {
 public:
  SignalForwarding() {
    if (::pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
      fail(ErrorCategory::runtime, std::string("cannot create a pipe: ") + std::strerror(errno));
    pending_signals = 0;
    pending_from_terminal = 0;
    struct sigaction action {};
    action.sa_sigaction = on_signal;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&action.sa_mask);
    for (const int signal_number : kForwardedSignals) {
      struct sigaction previous {};
      ::sigaction(signal_number, nullptr, &previous);
      if (previous.sa_handler == SIG_IGN) continue;
      ::sigaction(signal_number, &action, &saved_[signal_number]);
    }
    ::sigaction(SIGCHLD, &action, &saved_[SIGCHLD]);
  }
  ~SignalForwarding() {
    for (auto& [signal_number, previous] : saved_)
      ::sigaction(signal_number, &previous, nullptr);
    ::close(wake_pipe[0]);
    ::close(wake_pipe[1]);
    wake_pipe[0] = wake_pipe[1] = -1;
  }
  SignalForwarding(const SignalForwarding&) = delete;
  SignalForwarding& operator=(const SignalForwarding&) = delete;

  // Waits until a signal or a child's exit wakes the loop, or `timeout_ms` passes.
  static void wait(int timeout_ms) {
    pollfd descriptor{wake_pipe[0], POLLIN, 0};
    if (::poll(&descriptor, 1, timeout_ms) > 0) {
      char drain[64];
      while (::read(wake_pipe[0], drain, sizeof drain) > 0) {
      }
    }
  }

 private:
  std::map<int, struct sigaction> saved_;
};

class ChildSubreaper {
 public:
  ChildSubreaper() { ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); }
  ~ChildSubreaper() { ::prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0); }
};

struct ProcessInfo {
  pid_t parent = 0;
  pid_t group = 0;
  double cpu_s = 0.0;  // utime + stime + cutime + cstime (fields 14-17 of /proc/PID/stat)
};

// Every process below `root` (children, grandchildren, ...) with its /proc facts.
std::map<pid_t, ProcessInfo> descendants_of(pid_t root) {
  std::map<pid_t, ProcessInfo> all;
  std::error_code error;
  for (std::filesystem::directory_iterator entry("/proc", error), end; !error && entry != end;
       entry.increment(error)) {
    const std::string name = entry->path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(entry->path() / "stat");
    std::string content((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const size_t after_name = content.rfind(')');
    if (after_name == std::string::npos || after_name + 2 > content.size()) continue;
    std::istringstream fields(content.substr(after_name + 2));
    std::string field;
    ProcessInfo info;
    double ticks = 0.0;
    for (int index = 3; index <= 17 && fields >> field; ++index) {
      if (index == 4) info.parent = static_cast<pid_t>(std::strtol(field.c_str(), nullptr, 10));
      if (index == 5) info.group = static_cast<pid_t>(std::strtol(field.c_str(), nullptr, 10));
      if (index >= 14) ticks += std::strtod(field.c_str(), nullptr);
    }
    info.cpu_s = ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
    all[static_cast<pid_t>(std::stol(name))] = info;
  }
  std::map<pid_t, ProcessInfo> below;
  std::vector<pid_t> frontier{root};
  while (!frontier.empty()) {
    const pid_t parent = frontier.back();
    frontier.pop_back();
    for (const auto& [pid, info] : all)
      if (info.parent == parent && below.emplace(pid, info).second) frontier.push_back(pid);
  }
  return below;
}

double reaped_children_cpu_seconds() {
  rusage usage{};
  ::getrusage(RUSAGE_CHILDREN, &usage);
  return usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6 + usage.ru_stime.tv_sec +
         usage.ru_stime.tv_usec / 1e6;
}

const char* signal_name(int signal_number) {
  switch (signal_number) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    default:
      return "SIGHUP";
  }
}

// The CPU seconds of the measured tree: live descendants from /proc plus what ipj has reaped. Reaping and
// reading hold `mutex`, so that no process is counted twice or missed while it moves from one to the other.
struct TreeCpuTime {
  std::mutex mutex;
  double reaped_before = reaped_children_cpu_seconds();
  double highest = 0.0;  // the estimate meter expects a non-decreasing count

  double seconds() {
    const std::lock_guard<std::mutex> lock(mutex);
    double total = reaped_children_cpu_seconds() - reaped_before;
    for (const auto& [pid, info] : descendants_of(::getpid()))
      total += info.cpu_s;
    highest = std::max(highest, total);
    return highest;
  }
};

// Sends the signals that arrived since the last call to every process of the tree; a signal typed at the
// terminal already reached the processes of ipj's process group, so they are skipped for it.
void forward_pending_signals(CommandMeasurement& result) {
  const unsigned sent = pending_signals.exchange(0);
  const unsigned typed = pending_from_terminal.exchange(0);
  for (const int signal_number : kForwardedSignals) {
    const unsigned bit = 1u << signal_number;
    if (!((sent | typed) & bit)) continue;
    result.forwarded_signals.push_back(signal_name(signal_number));
    const pid_t own_group = ::getpgrp();
    for (const auto& [pid, info] : descendants_of(::getpid()))
      if ((sent & bit) || info.group != own_group) ::kill(pid, signal_number);
  }
}

}  // namespace

CommandMeasurement measure_command(const std::vector<std::string>& command, MeterOptions meter_options,
                                   int interval_ms, bool wait_for_descendants) {
  if (command.empty())
    fail(ErrorCategory::usage, "no command given: use ipj measure [options] -- CMD ARGS...");
  const ChildSubreaper subreaper;
  const SignalForwarding forwarding;
  auto tree_cpu = std::make_shared<TreeCpuTime>();
  meter_options.cpu_seconds = [tree_cpu]() -> double { return tree_cpu->seconds(); };
  EnergyMonitor monitor(discover_meters(meter_options), MonitorOptions{interval_ms, nullptr});

  std::vector<char*> arguments;
  for (const auto& argument : command)
    arguments.push_back(const_cast<char*>(argument.c_str()));
  arguments.push_back(nullptr);
  CommandMeasurement result;
  result.waited_for_descendants = wait_for_descendants;
  monitor.begin_window("command");
  pid_t pid = 0;
  const int spawn_error = ::posix_spawnp(&pid, arguments[0], nullptr, nullptr, arguments.data(), environ);
  if (spawn_error != 0) {
    monitor.end_window("command");
    result.started = false;
    result.start_error = std::strerror(spawn_error);
    result.exit_code = spawn_error == ENOENT || spawn_error == ENOTDIR ? 127 : 126;
    return result;
  }
  int status = 0;
  bool command_done = false;
  while (true) {
    bool no_children = false;
    while (true) {  // reap everything that has exited
      int exited_status = 0;
      pid_t exited = 0;
      {
        const std::lock_guard<std::mutex> lock(tree_cpu->mutex);
        exited = ::waitpid(-1, &exited_status, WNOHANG);
      }
      if (exited > 0) {
        if (exited == pid) {
          status = exited_status;
          command_done = true;
        } else {
          ++result.descendants_waited;
        }
        continue;
      }
      if (exited < 0 && errno == EINTR) continue;
      no_children = exited < 0 && errno == ECHILD;
      break;
    }
    if (command_done && (no_children || !wait_for_descendants)) break;
    forward_pending_signals(result);
    SignalForwarding::wait(200);
  }
  forward_pending_signals(result);  // a signal that arrived with the last exit is still reported
  result.descendants_running = static_cast<int>(descendants_of(::getpid()).size());
  result.energy = monitor.end_window("command");
  result.meters = monitor.meter_status();
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

}  // namespace ipj::energy
