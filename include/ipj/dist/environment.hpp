// The torchrun / SLURM / Kubernetes convention for data-parallel jobs: RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, read and validated once. LibTorch-free.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace ipj::dist {

struct DistributedEnvironment {
  int rank = 0;              // global rank, 0 .. world_size-1
  int world_size = 1;        // processes in the job
  int local_rank = 0;        // rank on this machine
  int local_world_size = 1;  // processes on this machine
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool agent_store =
      false;  // TORCHELASTIC_USE_AGENT_STORE=True: the launcher hosts the store, rank 0 joins it
  bool is_primary() const { return rank == 0; }
};

// Looks variables up by name (std::getenv in production; a map in tests).
using EnvironmentLookup = std::function<std::optional<std::string>(const std::string& name)>;
EnvironmentLookup process_environment();

// Reads the variables (and TORCHELASTIC_USE_AGENT_STORE, set by ipj launch and torchrun). RANK, WORLD_SIZE,
// MASTER_ADDR and MASTER_PORT are required; LOCAL_RANK defaults to RANK and LOCAL_WORLD_SIZE to WORLD_SIZE
// (one machine). Throws ipj::Error(usage) naming the variable, its value and the fix for anything missing,
// non-numeric or out of range (e.g. RANK >= WORLD_SIZE).
DistributedEnvironment read_distributed_environment(const EnvironmentLookup& lookup = process_environment());

}  // namespace ipj::dist
