// AgentStore: a c10d TCPStore server on port 0 held by the launcher for the job's lifetime.
// It does not wait for the ranks (they time out in their own rendezvous, with their own error message).
#include "ipj/dist/agent_store.hpp"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "ipj/core/error.hpp"

namespace ipj::dist {

struct AgentStore::State {
  c10::intrusive_ptr<c10d::TCPStore> store;
};

AgentStore::AgentStore(const std::string& master_addr, int world_size) : state_(std::make_unique<State>()) {
  try {
    c10d::TCPStoreOptions options;
    options.port = 0;  // the kernel picks a free port and the store keeps it bound
    options.isServer = true;
    options.numWorkers = static_cast<std::size_t>(world_size);
    options.waitWorkers = false;
    state_->store = c10::make_intrusive<c10d::TCPStore>(master_addr, options);
  } catch (const std::exception& error) {
    fail(ErrorCategory::io,
         std::string("ipj launch: cannot host the job's rendezvous store on a free port: ") + error.what() +
             " (give a port with --master-port)");
  }
}

AgentStore::~AgentStore() = default;

int AgentStore::port() const {
  return state_->store->getPort();
}

}  // namespace ipj::dist
