// `ipj measure -- CMD`: runs any command as a child process while the energy monitor watches, and reports its
// energy. ipj becomes a child subreaper, so processes the command leaves behind (`cmd &`) are reparented to
// it and waited for; SIGINT/SIGTERM/SIGHUP sent to ipj are forwarded to the whole tree. Linux only. The CPU
// estimate (where no sensor exists) uses the CPU time of the whole tree (/proc while it runs, rusage).
#pragma once

#include <string>
#include <vector>

#include "ipj/energy/meter.hpp"

namespace ipj::energy {

struct CommandMeasurement {
  bool started = true;      // false: the command could not be started (see exit_code, start_error)
  std::string start_error;  // why it could not start, e.g. "No such file or directory"
  // The command's exit status; 128 + N when killed by signal N; 127 when not found and 126 when found but
  // not executable (shell conventions), with started == false.
  int exit_code = 0;
  bool waited_for_descendants = true;          // false with --no-wait-descendants
  int descendants_waited = 0;                  // processes other than the command that ipj reaped (orphans)
  int descendants_running = 0;                 // descendants still alive when the measurement ended
  std::vector<std::string> forwarded_signals;  // e.g. {"SIGTERM"}, in the order they arrived
  Measurement energy;
  std::vector<MeterStatus> meters;
};

// Runs `command` (argv[0] looked up in PATH) with ipj's stdin/stdout/stderr and measures it until the command
// and, when `wait_for_descendants`, every process it started have exited. Throws ipj::Error(usage) for an
// empty command; a command that cannot start is reported in the result (started == false).
// `meter_options.cpu_seconds` is replaced by the tree's CPU time.
CommandMeasurement measure_command(const std::vector<std::string>& command, MeterOptions meter_options,
                                   int interval_ms, bool wait_for_descendants = true);

}  // namespace ipj::energy
