// posix_spawnp + waitpid under an EnergyMonitor window; child CPU time from /proc/PID/stat and getrusage.
#include "ipj/energy/command_runner.hpp"

#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "ipj/core/error.hpp"
#include "ipj/energy/energy_monitor.hpp"

extern char** environ;

namespace ipj::energy {
namespace {

// utime + stime + cutime + cstime of a running process, in seconds (fields 14-17 of /proc/PID/stat).
double running_cpu_seconds(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string content((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t after_name = content.rfind(')');
  if (after_name == std::string::npos) return 0.0;
  std::istringstream fields(content.substr(after_name + 2));
  std::string field;
  double ticks = 0.0;
  for (int index = 3; index <= 17 && fields >> field; ++index)
    if (index >= 14) ticks += std::strtod(field.c_str(), nullptr);
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

double children_cpu_seconds() {
  rusage usage{};
  ::getrusage(RUSAGE_CHILDREN, &usage);
  return usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6 + usage.ru_stime.tv_sec +
         usage.ru_stime.tv_usec / 1e6;
}

}  // namespace

CommandMeasurement measure_command(const std::vector<std::string>& command, MeterOptions meter_options,
                                   int interval_ms) {
  if (command.empty())
    fail(ErrorCategory::usage, "no command given: use ipj measure [options] -- CMD ARGS...");
  struct ChildState {
    std::atomic<pid_t> pid{0};
    std::atomic<bool> finished{false};
    std::atomic<double> final_cpu_s{0.0};
    double cpu_before = children_cpu_seconds();
  };
  auto child = std::make_shared<ChildState>();
  meter_options.cpu_seconds = [child]() -> double {
    if (child->finished) return child->final_cpu_s;
    const pid_t pid = child->pid;
    return pid > 0 ? running_cpu_seconds(pid) : 0.0;
  };
  EnergyMonitor monitor(discover_meters(meter_options), MonitorOptions{interval_ms, nullptr});

  std::vector<char*> arguments;
  for (const auto& argument : command)
    arguments.push_back(const_cast<char*>(argument.c_str()));
  arguments.push_back(nullptr);
  monitor.begin_window("command");
  pid_t pid = 0;
  const int spawn_error = ::posix_spawnp(&pid, arguments[0], nullptr, nullptr, arguments.data(), environ);
  if (spawn_error != 0) {
    fail(ErrorCategory::usage, "cannot run '" + command[0] + "': " + std::strerror(spawn_error) +
                                   " (check the command name and PATH)");
  }
  child->pid = pid;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  child->final_cpu_s = children_cpu_seconds() - child->cpu_before;
  child->finished = true;

  CommandMeasurement result;
  result.energy = monitor.end_window("command");
  result.meters = monitor.meter_status();
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

}  // namespace ipj::energy
