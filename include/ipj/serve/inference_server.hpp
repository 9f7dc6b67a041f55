// `ipj serve`: the KServe v2 REST server (cpp-httplib, a fixed pool of connection threads) over the models of
// a repository. Batches run on each model's batcher workers, never on connection threads. Lifecycle: load +
// warm-up, then ready; drain() makes it unready, lets in-flight requests finish (bounded) and stops
// listening.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ipj/energy/energy_monitor.hpp"
#include "ipj/serve/served_model.hpp"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace ipj::serve {

struct ServeOptions {
  std::string model_repository;
  std::string host = "127.0.0.1";
  int port = 8000;         // 0 = any free port (see port())
  int http_threads = 128;  // connections served at once (keep-alive clients hold one each)
  std::size_t max_body_bytes = 64 << 20;
  double drain_s = 10.0;
  double usd_per_kwh = -1.0;
  bool measure_energy = true;
  double cpu_tdp_w = 0.0;
  int energy_interval_ms = 100;
};

class InferenceServer {
 public:
  explicit InferenceServer(ServeOptions options);  // reads the repository, loads and warms every model
  ~InferenceServer();
  InferenceServer(const InferenceServer&) = delete;
  InferenceServer& operator=(const InferenceServer&) = delete;

  // Binds (throws ipj::Error(io) when the port is taken); returns the bound port.
  int bind();
  // Serves until drain() or stop(); call after bind().
  void serve();
  // Not ready any more, waits for in-flight requests (at most drain_s), then stops listening. Thread-safe.
  void drain();
  int port() const { return port_; }
  bool ready() const { return ready_; }
  const std::vector<std::unique_ptr<ServedModel>>& models() const { return models_; }

 private:
  void install_routes();
  void handle_infer(const httplib::Request& request, httplib::Response& response,
                    const std::string& model_name, const std::string& version);
  ServedModel* find_model(const std::string& name, const std::string& version, std::string& error) const;

  ServeOptions options_;
  std::unique_ptr<energy::EnergyMonitor> monitor_;
  std::unique_ptr<EnergyLedger> ledger_;
  std::vector<std::unique_ptr<ServedModel>> models_;
  std::unique_ptr<httplib::Server> http_;
  std::atomic<bool> ready_{false};
  std::mutex lifecycle_mutex_;  // orders serve() against drain()
  bool serving_ = false;
  bool draining_ = false;
  std::atomic<int> in_flight_{0};
  int port_ = 0;
};

}  // namespace ipj::serve
