// Routes of the KServe v2 / Triton REST API, error mapping (400/404/413/503/500) and the drain.
#include "ipj/serve/inference_server.hpp"

#include <httplib.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <chrono>
#include <thread>

#include "ipj/core/error.hpp"
#include "ipj/energy/meter.hpp"
#include "ipj/serve/kserve_codec.hpp"

namespace ipj::serve {
namespace {

void reply_error(httplib::Response& response, int status, const std::string& message) {
  response.status = status;
  if (status == 503) response.set_header("Retry-After", "1");
  response.set_content(Json{{"error", message}}.dump(-1, ' ', false, Json::error_handler_t::replace),
                       "application/json");
}

void reply_json(httplib::Response& response, const Json& body) {
  response.status = 200;
  response.set_content(body.dump(), "application/json");
}

std::string match(const httplib::Request& request, std::size_t index) {
  return index < request.matches.size() ? std::string(request.matches[index]) : std::string();
}

// cpp-httplib 0.11 (Debian's shared library) listens with a backlog of 5: bursts of new connections (a load
// generator opening 64 at once) overflow it and clients see resets. Calling listen() again on the bound
// socket raises the backlog (Linux); the socket is found by its port among this process's descriptors.
void raise_listen_backlog(int port) {
  for (int descriptor = 0; descriptor < 4096; ++descriptor) {
    int accepting = 0;
    socklen_t length = sizeof accepting;
    if (getsockopt(descriptor, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &length) != 0 || !accepting) continue;
    sockaddr_storage address{};
    socklen_t address_length = sizeof address;
    if (getsockname(descriptor, reinterpret_cast<sockaddr*>(&address), &address_length) != 0) continue;
    int bound = -1;
    if (address.ss_family == AF_INET) bound = ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
    if (address.ss_family == AF_INET6) bound = ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port);
    if (bound == port) ::listen(descriptor, SOMAXCONN);
  }
}

}  // namespace

InferenceServer::InferenceServer(ServeOptions options) : options_(std::move(options)) {
  energy::MeterOptions meter_options;
  meter_options.cpu_tdp_w = options_.cpu_tdp_w;
  monitor_ = std::make_unique<energy::EnergyMonitor>(
      options_.measure_energy ? energy::discover_meters(meter_options) : energy::MeterSet{},
      energy::MonitorOptions{options_.energy_interval_ms, nullptr});
  energy::EnergyMonitor* monitor = monitor_.get();
  const bool measure = options_.measure_energy;
  ledger_ = std::make_unique<EnergyLedger>(measure ? std::function<EnergyLedger::Reading()>([monitor] {
    const energy::Measurement total = monitor->latest();  // no meter read per batch
    return EnergyLedger::Reading{total.energy_j,
                                 total.devices.empty() ? "none" : energy::source_name(total.source)};
  })
                                                   : std::function<EnergyLedger::Reading()>());
  for (ModelConfig& config : read_model_repository(options_.model_repository)) {
    spdlog::info("loading model '{}' version {} ({})", config.name, config.latest_version(),
                 config.model_path(config.latest_version()));
    models_.push_back(std::make_unique<ServedModel>(std::move(config), *ledger_));
  }
  http_ = std::make_unique<httplib::Server>();
  const int threads = options_.http_threads;
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<std::size_t>(threads)); };
  http_->set_payload_max_length(options_.max_body_bytes);
  http_->set_keep_alive_max_count(1000000);
  http_->set_keep_alive_timeout(30);
  http_->set_tcp_nodelay(true);
  install_routes();
}

InferenceServer::~InferenceServer() {
  if (http_) http_->stop();
  models_.clear();  // stops the batchers before the ledger and monitor go
}

int InferenceServer::bind() {
  if (options_.port == 0) {
    port_ = http_->bind_to_any_port(options_.host);
  } else {
    port_ = http_->bind_to_port(options_.host, options_.port) ? options_.port : -1;
  }
  if (port_ <= 0)
    fail(ErrorCategory::io, "cannot listen on " + options_.host + ":" + std::to_string(options_.port) +
                                " (port in use or host not local?); pick another --port");
  raise_listen_backlog(port_);
  return port_;
}

void InferenceServer::serve() {
  {
    std::lock_guard<std::mutex> lock(lifecycle_mutex_);
    if (draining_) return;  // a signal arrived while loading: do not start serving at all
    serving_ = true;
    ready_ = true;
  }
  http_->listen_after_bind();
}

void InferenceServer::drain() {
  bool serving = false;
  {
    std::lock_guard<std::mutex> lock(lifecycle_mutex_);
    draining_ = true;
    ready_ = false;
    serving = serving_;
  }
  if (!serving) return;  // serve() will see draining_ and return
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(options_.drain_s);
  while (in_flight_ > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (in_flight_ > 0)
    spdlog::warn("drain: {} request(s) still running after {} s", in_flight_.load(), options_.drain_s);
  // serve() may not have reached listen yet: stop() before that would leave listen running
  for (int wait = 0; wait < 2000 && !http_->is_running(); ++wait)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  http_->stop();
}

ServedModel* InferenceServer::find_model(const std::string& name, const std::string& version,
                                         std::string& error) const {
  for (const auto& model : models_) {
    if (model->config().name != name) continue;
    if (!version.empty() && version != model->version()) {
      error = "model '" + name + "' has no loaded version '" + version + "' (serving version " +
              model->version() + ")";
      return nullptr;
    }
    return model.get();
  }
  error = "unknown model '" + name + "'";
  return nullptr;
}

void InferenceServer::install_routes() {
  httplib::Server& http = *http_;
  http.Get("/v2", [](const httplib::Request&, httplib::Response& response) {
    reply_json(response, {{"name", "ipj"},
                          {"version", "0.1.0"},
                          {"extensions", {"binary_tensor_data", "model_configuration", "statistics"}}});
  });
  http.Get("/v2/health/live",
           [](const httplib::Request&, httplib::Response& response) { response.status = 200; });
  http.Get("/v2/health/ready", [this](const httplib::Request&, httplib::Response& response) {
    if (ready_)
      response.status = 200;
    else
      reply_error(response, 503, "not ready");
  });
  // Before the model routes: "stats" would otherwise match as a model name.
  http.Get("/v2/models/stats", [this](const httplib::Request&, httplib::Response& response) {
    Json stats = Json::array();
    for (const auto& model : models_)
      stats.push_back(model->triton_stats());
    reply_json(response, {{"model_stats", stats}});
  });
  const std::string model_path = R"(/v2/models/([^/]+)(?:/versions/([^/]+))?)";
  http.Get(model_path, [this](const httplib::Request& request, httplib::Response& response) {
    std::string error;
    ServedModel* model = find_model(match(request, 1), match(request, 2), error);
    if (!model) return reply_error(response, 404, error);
    reply_json(response, model->metadata());
  });
  http.Get(model_path + "/ready", [this](const httplib::Request& request, httplib::Response& response) {
    std::string error;
    if (!find_model(match(request, 1), match(request, 2), error)) return reply_error(response, 404, error);
    if (ready_)
      response.status = 200;
    else
      reply_error(response, 503, "not ready");
  });
  http.Get(model_path + "/config", [this](const httplib::Request& request, httplib::Response& response) {
    std::string error;
    ServedModel* model = find_model(match(request, 1), match(request, 2), error);
    if (!model) return reply_error(response, 404, error);
    reply_json(response, model->triton_config());
  });
  http.Get(model_path + "/stats", [this](const httplib::Request& request, httplib::Response& response) {
    std::string error;
    ServedModel* model = find_model(match(request, 1), match(request, 2), error);
    if (!model) return reply_error(response, 404, error);
    reply_json(response, {{"model_stats", Json::array({model->triton_stats()})}});
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& response) {
    response.set_content(prometheus_metrics(models_, options_.usd_per_kwh) + monitor_->prometheus_text(),
                         "text/plain; version=0.0.4");
  });
  http.Post(model_path + "/infer", [this](const httplib::Request& request, httplib::Response& response) {
    handle_infer(request, response, match(request, 1), match(request, 2));
  });
  http.set_error_handler([](const httplib::Request&, httplib::Response& response) {
    if (!response.body.empty()) return;
    const std::string message = response.status == 404   ? "no such endpoint"
                                : response.status == 413 ? "request body too large"
                                                         : "request failed";
    response.set_content(Json{{"error", message}}.dump(-1, ' ', false, Json::error_handler_t::replace),
                         "application/json");
  });
  http.set_exception_handler(
      [](const httplib::Request&, httplib::Response& response, std::exception_ptr error) {
        std::string message = "internal error";
        try {
          std::rethrow_exception(error);
        } catch (const std::exception& exception) {
          message += std::string(": ") + exception.what();
        } catch (...) {
        }
        reply_error(response, 500, message);
      });
}

void InferenceServer::handle_infer(const httplib::Request& request, httplib::Response& response,
                                   const std::string& model_name, const std::string& version) {
  const auto arrived = Clock::now();
  std::string error;
  ServedModel* model = find_model(model_name, version, error);
  if (!model) return reply_error(response, 404, error);
  if (!ready_) {
    model->record_failure("not_ready");
    return reply_error(response, 503, "server is shutting down or not ready");
  }
  in_flight_ += 1;
  struct Leave {
    std::atomic<int>& count;
    ~Leave() { count -= 1; }
  } leave{in_flight_};
  InferRequest parsed;
  try {
    std::optional<std::size_t> header_length;
    if (request.has_header("Inference-Header-Content-Length")) {
      const std::string value = request.get_header_value("Inference-Header-Content-Length");
      try {
        std::size_t used = 0;
        header_length = std::stoull(value, &used);
        if (used != value.size()) throw std::invalid_argument(value);
      } catch (const std::exception&) {
        fail(ErrorCategory::invalid_input, "Inference-Header-Content-Length '" + value + "' is not a number");
      }
    }
    parsed = parse_infer_request(request.body, header_length, model->config());
  } catch (const Error& bad) {
    model->record_failure("bad_input");
    return reply_error(response, 400, bad.what());
  } catch (const Json::exception& bad) {
    model->record_failure("bad_input");
    return reply_error(response, 400, std::string("malformed request: ") + bad.what());
  }
  auto pending = std::make_shared<PendingRequest>();
  pending->shape = parsed.shape;
  pending->data = std::move(parsed.data);
  if (parsed.timeout_us) pending->deadline = arrived + std::chrono::microseconds(*parsed.timeout_us);
  std::future<Outcome> future = pending->promise.get_future();
  switch (model->batcher().submit(pending)) {
    case DynamicBatcher::Admission::accepted:
      break;
    case DynamicBatcher::Admission::queue_full:
      model->record_failure("queue_full");
      return reply_error(response, 503, "queue of model '" + model->config().name + "' is full; retry later");
    case DynamicBatcher::Admission::stopped:
      model->record_failure("not_ready");
      return reply_error(response, 503, "model '" + model->config().name + "' is shutting down");
  }
  const Outcome outcome = future.get();
  if (outcome.status != 200) {
    model->record_failure(outcome.status == 503 ? "timeout" : "internal");
    return reply_error(response, outcome.status, outcome.error);
  }
  const EncodedResponse encoded =
      encode_infer_response(model->config(), model->version(), parsed, outcome.output_shape, outcome.output);
  if (encoded.header_length)
    response.set_header("Inference-Header-Content-Length", std::to_string(*encoded.header_length));
  response.set_content(encoded.body, encoded.content_type.c_str());
  model->record_success(std::chrono::duration<double, std::micro>(Clock::now() - arrived).count());
}

}  // namespace ipj::serve
