// `ipj serve`: the KServe v2 REST server over the models of a repository, on the event-driven HTTP front end
// (http_front_end.hpp). Batches run on each model's batcher workers, never on IO threads. Lifecycle: options
// checked, repository read, port bound (a port in use fails here, before any model loads), models loaded and
// warmed up, then ready; drain() makes it unready, closes idle connections, lets in-flight requests finish
// (at most drain_s) and stops.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ipj/device/allocator.hpp"
#include "ipj/energy/energy_monitor.hpp"
#include "ipj/serve/http_front_end.hpp"
#include "ipj/serve/kserve_codec.hpp"
#include "ipj/serve/served_model.hpp"

namespace ipj::serve {

struct ServeOptions {
  std::string model_repository;
  std::string host = "127.0.0.1";
  int port = 8000;  // 0 = any free port (see port())
  HttpLimits http;  // connections, timeouts, body size, IO threads
  RequestLimits request;
  double drain_s = 10.0;
  double usd_per_kwh = -1.0;
  bool measure_energy = true;
  double cpu_tdp_w = 0.0;
  int energy_interval_ms = 100;
  int threads = 0;  // 0: ipj's plan, re-planned while serving; N: N threads, fixed (serve_threads.hpp)
};

// Throws ipj::Error(usage) naming the flag of the first option out of range (NaN and negatives included).
void validate(const ServeOptions& options);

class InferenceServer {
 public:
  // Validates the options, reads the repository, binds the port (throws ipj::Error(io) naming it when it is
  // taken), then loads and warms every model.
  explicit InferenceServer(ServeOptions options);
  ~InferenceServer();
  InferenceServer(const InferenceServer&) = delete;
  InferenceServer& operator=(const InferenceServer&) = delete;

  // The bound port (bound by the constructor; kept as a call for the serve loop's order).
  int bind() const { return port_; }
  // Serves until drain() or stop(); call after construction.
  void serve();
  // Not ready any more; closes idle connections, waits for in-flight requests (at most drain_s), stops.
  // Thread-safe; before serve() it makes serve() return at once.
  void drain();
  int port() const { return port_; }
  bool ready() const { return ready_; }
  const std::vector<std::unique_ptr<ServedModel>>& models() const { return models_; }
  HttpCounters http_counters() const { return http_->counters(); }

 private:
  void handle(HttpRequest&& request, const HttpReply& reply);
  void handle_infer(HttpRequest&& request, const HttpReply& reply, const std::string& model_name,
                    const std::string& version);
  ServedModel* find_model(const std::string& name, const std::string& version, std::string& error) const;
  std::string metrics_text() const;

  ServeOptions options_;
  // glibc's malloc tuned for the server's life, before any model loads (its timings run on it)
  std::unique_ptr<device::ScopedAllocator> allocator_;
  std::unique_ptr<energy::EnergyMonitor> monitor_;
  std::unique_ptr<EnergyLedger> ledger_;
  std::unique_ptr<HttpFrontEnd> http_;     // before models_: destroyed after the batchers stopped
  std::unique_ptr<ServeThreads> threads_;  // before models_: their batches enter it
  std::vector<std::unique_ptr<ServedModel>> models_;
  std::atomic<bool> ready_{false};
  int port_ = 0;
};

}  // namespace ipj::serve
