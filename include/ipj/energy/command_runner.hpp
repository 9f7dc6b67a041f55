// `ipj measure -- CMD`: runs any command as a child process while the energy monitor watches, and reports its
// energy. The CPU estimate (where no sensor exists) uses the child's CPU time (/proc while it runs, rusage at
// exit).
#pragma once

#include <string>
#include <vector>

#include "ipj/energy/meter.hpp"

namespace ipj::energy {

struct CommandMeasurement {
  int exit_code = 0;  // the command's exit status; 128 + N when killed by signal N
  Measurement energy;
  std::vector<MeterStatus> meters;
};

// Runs `command` (argv[0] looked up in PATH) with ipj's stdin/stdout/stderr. Throws ipj::Error(usage) when it
// cannot be started. `meter_options.cpu_seconds` is replaced by the child's CPU time.
CommandMeasurement measure_command(const std::vector<std::string>& command, MeterOptions meter_options,
                                   int interval_ms);

}  // namespace ipj::energy
