// The rendezvous store hosted by `ipj launch` itself (torchrun's "agent store"): the launcher binds a free
// port and keeps it for the whole job, so no other process can take the port between choosing and binding it.
// LibTorch-free header; the c10d TCPStore lives in the implementation.
#pragma once

#include <memory>
#include <string>

namespace ipj::dist {

// Set for every rank when the launcher hosts the store: rank 0 then joins as a client, as under torchrun.
inline constexpr const char* kAgentStoreVariable = "TORCHELASTIC_USE_AGENT_STORE";

class AgentStore {
 public:
  // Listens on a port the kernel picks (all local addresses) until destroyed. Throws ipj::Error(io) when no
  // socket can be bound.
  AgentStore(const std::string& master_addr, int world_size);
  ~AgentStore();
  AgentStore(const AgentStore&) = delete;
  AgentStore& operator=(const AgentStore&) = delete;
  int port() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace ipj::dist
