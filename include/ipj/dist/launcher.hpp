// `ipj launch`: starts the local ranks of a data-parallel job the way torchrun does (RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), prefixes their output with the rank, forwards
// SIGINT/SIGTERM, and ends the whole job within a bounded time when one rank fails. LibTorch-free; Linux.
#pragma once

#include <string>
#include <vector>

namespace ipj::dist {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;    // 0: the launcher hosts the rendezvous store on a free port (single-node jobs only)
  double grace_s = 10.0;  // after a failure or a signal: SIGTERM to every rank, SIGKILL after this long
  std::vector<std::string> command;
};

struct LaunchResult {
  int exit_code = 0;     // 0; the failed rank's exit code (128 + signal when it was killed); 128 + signal
                         // when the launcher itself was interrupted
  int failed_rank = -1;  // global rank of the first rank that failed, -1 if none
  int master_port = 0;   // the port the job used
  std::string summary;   // one line: what happened
};

// Throws ipj::Error(usage) for invalid options (named by their flag).
void validate(const LaunchOptions& options);

// Runs the job to completion. stdout of global rank 0 passes through unchanged (the job's result, e.g. one
// JSON object); every other stream is prefixed line by line with "[rank N] ". The environment of each rank is
// this process's environment plus the variables above, and OMP_NUM_THREADS = max(1, cores / nproc_per_node)
// where it is not set already (as torchrun does).
LaunchResult run_launch(const LaunchOptions& options);

// A TCP port that was free on `address` a moment ago (bind to port 0, read it, close).
int find_free_port(const std::string& address);

}  // namespace ipj::dist
