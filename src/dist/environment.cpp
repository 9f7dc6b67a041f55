// Parsing and validation of the torchrun environment variables.
#include "ipj/dist/environment.hpp"

#include <charconv>
#include <cstdlib>

#include "ipj/core/error.hpp"
#include "ipj/dist/agent_store.hpp"

namespace ipj::dist {
namespace {

const char* const kHowToSet =
    "start the job with `ipj launch --nproc-per-node N -- ipj train --distributed ...`, torchrun, or set "
    "RANK, "
    "WORLD_SIZE, MASTER_ADDR and MASTER_PORT yourself (docs/DISTRIBUTED.md)";

std::string required(const EnvironmentLookup& lookup, const std::string& name) {
  const std::optional<std::string> value = lookup(name);
  if (!value || value->empty())
    fail(ErrorCategory::usage,
         "--distributed: the environment variable " + name + " is not set; " + kHowToSet);
  return *value;
}

int parse_integer(const std::string& name, const std::string& text, int minimum, int maximum) {
  int value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (error != std::errc() || stop != end || value < minimum || value > maximum)
    fail(ErrorCategory::usage, "--distributed: " + name + "='" + text + "' must be an integer in [" +
                                   std::to_string(minimum) + ", " + std::to_string(maximum) + "]; " +
                                   kHowToSet);
  return value;
}

}  // namespace

EnvironmentLookup process_environment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

DistributedEnvironment read_distributed_environment(const EnvironmentLookup& lookup) {
  constexpr int kMaxProcesses = 1 << 20;
  DistributedEnvironment environment;
  environment.world_size = parse_integer("WORLD_SIZE", required(lookup, "WORLD_SIZE"), 1, kMaxProcesses);
  environment.rank = parse_integer("RANK", required(lookup, "RANK"), 0, environment.world_size - 1);
  environment.master_addr = required(lookup, "MASTER_ADDR");
  environment.master_port = parse_integer("MASTER_PORT", required(lookup, "MASTER_PORT"), 1, 65535);
  const std::optional<std::string> local_world_size = lookup("LOCAL_WORLD_SIZE");
  environment.local_world_size =
      local_world_size && !local_world_size->empty()
          ? parse_integer("LOCAL_WORLD_SIZE", *local_world_size, 1, environment.world_size)
          : environment.world_size;
  const std::optional<std::string> local_rank = lookup("LOCAL_RANK");
  environment.local_rank = local_rank && !local_rank->empty()
                               ? parse_integer("LOCAL_RANK", *local_rank, 0, environment.local_world_size - 1)
                               : environment.rank % environment.local_world_size;
  environment.agent_store = lookup(kAgentStoreVariable).value_or("") == "True";
  return environment;
}

}  // namespace ipj::dist
