// The KServe v2 / Triton endpoints of `ipj serve` on the HTTP front end, their error mapping
// (400/404/405/413/503, 500 only when a model fails or returns non-finite outputs), and the server's
// lifecycle (bind before load, drain).
#include "ipj/serve/inference_server.hpp"

#include <spdlog/spdlog.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <new>
#include <sstream>

#include "ipj/core/error.hpp"
#include "ipj/energy/meter.hpp"
#include "ipj/infer/model_bench.hpp"
#include "ipj/infer/onednn_runtime.hpp"
#include "ipj/infer/xnnpack_runtime.hpp"
#include "request_router.hpp"

namespace ipj::serve {
namespace {

HttpResponse error_response(int status, const std::string& message) {
  HttpResponse response;
  response.status = status;
  response.body = Json{{"error", message}}.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (status == 503) response.headers.emplace_back("Retry-After", "1");
  return response;
}

HttpResponse json_response(const Json& body) {
  HttpResponse response;
  response.body = body.dump(-1, ' ', false, Json::error_handler_t::replace);
  return response;
}

HttpResponse empty_response(int status) {
  HttpResponse response;
  response.status = status;
  response.content_type = "text/plain";
  return response;
}

}  // namespace

void validate(const ServeOptions& options) {
  if (options.port < 0 || options.port > 65535)
    fail(ErrorCategory::usage,
         "--port " + std::to_string(options.port) + " is not a TCP port (0..65535; 0 = any free port)");
  if (!std::isfinite(options.drain_s) || options.drain_s < 0.0 || options.drain_s > 3600.0)
    fail(ErrorCategory::usage,
         "--drain-s must be a number of seconds in [0, 3600], got " + std::to_string(options.drain_s));
  if (std::isnan(options.usd_per_kwh) || std::isinf(options.usd_per_kwh))
    fail(ErrorCategory::usage, "--usd-per-kwh must be a finite price");
  if (!std::isfinite(options.cpu_tdp_w) || options.cpu_tdp_w < 0.0)
    fail(ErrorCategory::usage, "--cpu-tdp-w must be >= 0 watts");
  if (options.threads < 0 || options.threads > 1024)
    fail(ErrorCategory::usage,
         "--threads must be in [0, 1024] (0 = ipj's plan), got " + std::to_string(options.threads));
  if (options.request.max_tensor_bytes < 4)
    fail(ErrorCategory::usage, "--max-tensor-bytes must be at least 4 (one FP32 value)");
  validate(options.http);
}

InferenceServer::InferenceServer(ServeOptions options) : options_(std::move(options)) {
  validate(options_);
  std::vector<ModelConfig> configs = read_model_repository(options_.model_repository);
  http_ = std::make_unique<HttpFrontEnd>(
      options_.http,
      [this](HttpRequest&& request, const HttpReply& reply) { handle(std::move(request), reply); });
  port_ = http_->bind(options_.host, options_.port);  // before loading: a port in use fails in milliseconds
  energy::MeterOptions meter_options;
  meter_options.cpu_tdp_w = options_.cpu_tdp_w;
  monitor_ = std::make_unique<energy::EnergyMonitor>(
      options_.measure_energy ? energy::discover_meters(meter_options) : energy::MeterSet{},
      energy::MonitorOptions{options_.energy_interval_ms, nullptr});
  const Clock::time_point monitor_epoch = Clock::now();
  energy::EnergyMonitor* monitor = monitor_.get();
  std::function<EnergyLedger::Reading()> read_total;
  if (options_.measure_energy)
    read_total = [monitor] {
      const energy::Measurement total = monitor->latest();  // no meter read per batch
      return EnergyLedger::Reading{
          total.energy_j, total.devices.empty() ? energy::ReportedSource() : total.source, total.wall_s};
    };
  ledger_ = std::make_unique<EnergyLedger>(std::move(read_total), monitor_epoch);
  threads_ = std::make_unique<ServeThreads>(options_.threads);
  // large freed blocks reused from the heap, as in training and ipj bench: glibc's defaults page-fault an
  // eager model's batch activations on every call (a cnn's batch of 64: 55 ms against 8)
  allocator_ = std::make_unique<device::ScopedAllocator>(device::AllocatorChoice::tuned);
  spdlog::info("allocator: {}", allocator_->plan().reason);
  std::vector<device::ThreadWorkload> workloads;
  for (ModelConfig& config : configs) {
    spdlog::info("loading model '{}' version {} ({})", config.name, config.latest_version(),
                 config.model_path(config.latest_version()));
    models_.push_back(std::make_unique<ServedModel>(std::move(config), *ledger_, threads_.get()));
    workloads.push_back(infer::inference_thread_workload(models_.back()->model()));
  }
  threads_->start(workloads);  // before any batch: requests are read once serve() runs
}

InferenceServer::~InferenceServer() {
  if (http_) http_->stop();
  // Stops the batchers (their last replies go nowhere) before the front end and the ledger go.
  models_.clear();
}

void InferenceServer::serve() {
  ready_ = true;
  http_->run();  // returns at once when drain() came first
  ready_ = false;
}

void InferenceServer::drain() {
  ready_ = false;
  http_->drain(options_.drain_s);
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

std::string InferenceServer::metrics_text() const {
  const HttpCounters http = http_->counters();
  std::string text = prometheus_metrics(models_, options_.usd_per_kwh) + monitor_->prometheus_text() +
                     threads_->prometheus_text();
  const EnergyLedger::Reading idle = ledger_->idle();
  std::ostringstream idle_text;
  idle_text.precision(15);
  idle_text << "# HELP ipj_idle_energy_joules_total Joules the meters counted between batches (no model "
               "running), charged to no model\n# TYPE ipj_idle_energy_joules_total counter\n"
            << "ipj_idle_energy_joules_total{source=\"" << energy::reported_source_name(idle.source) << "\"} "
            << idle.total_j << "\n";
  text += idle_text.str();
  text += "# HELP ipj_http_open_connections Open HTTP connections\n# TYPE ipj_http_open_connections gauge\n";
  text += "ipj_http_open_connections " + std::to_string(http.open_connections) + "\n";
  text += "# HELP ipj_http_refused_connections_total Connections answered 503 over --max-connections\n";
  text += "# TYPE ipj_http_refused_connections_total counter\n";
  text += "ipj_http_refused_connections_total " + std::to_string(http.refused_total) + "\n";
  text +=
      "# HELP ipj_http_refused_per_client_connections_total Connections answered 503 over "
      "--max-connections-per-client\n";
  text += "# TYPE ipj_http_refused_per_client_connections_total counter\n";
  text +=
      "ipj_http_refused_per_client_connections_total " + std::to_string(http.refused_per_client_total) + "\n";
  text += "# HELP ipj_http_timeouts_total Connections closed by a header, body, idle or write deadline\n";
  text += "# TYPE ipj_http_timeouts_total counter\n";
  text += "ipj_http_timeouts_total " + std::to_string(http.timeouts_total) + "\n";
  text +=
      "# HELP ipj_xnnpack_runtime_calls_total Model calls (batches) XNNPACK runtimes answered, every model; "
      "the "
      "others ran on LibTorch\n# TYPE ipj_xnnpack_runtime_calls_total counter\n";
  text += "ipj_xnnpack_runtime_calls_total " + std::to_string(infer::xnnpack_runtime_calls()) + "\n";
  text +=
      "# HELP ipj_onednn_runtime_calls_total Model calls (batches) oneDNN runtimes answered, every model\n";
  text += "# TYPE ipj_onednn_runtime_calls_total counter\n";
  text += "ipj_onednn_runtime_calls_total " + std::to_string(infer::onednn_runtime_calls()) + "\n";
  return text;
}

void InferenceServer::handle(HttpRequest&& request, const HttpReply& reply) {
  const Route route = route_request(request.method, request.target);
  std::string error;
  ServedModel* model = nullptr;
  switch (route.endpoint) {
    case Endpoint::model_metadata:
    case Endpoint::model_ready:
    case Endpoint::model_config:
    case Endpoint::model_stats:
      model = find_model(route.model, route.version, error);
      if (!model) return reply(error_response(404, error));
      break;
    default:
      break;
  }
  switch (route.endpoint) {
    case Endpoint::server_metadata:
      return reply(
          json_response({{"name", "ipj"},
                         {"version", "0.1.0"},
                         {"extensions", {"binary_tensor_data", "model_configuration", "statistics"}}}));
    case Endpoint::health_live:
      return reply(empty_response(200));
    case Endpoint::health_ready:
    case Endpoint::model_ready:
      return reply(ready_ ? empty_response(200) : error_response(503, "not ready"));
    case Endpoint::all_stats: {
      Json stats = Json::array();
      for (const auto& served : models_)
        stats.push_back(served->triton_stats());
      return reply(json_response({{"model_stats", stats}}));
    }
    case Endpoint::model_metadata:
      return reply(json_response(model->metadata()));
    case Endpoint::model_config:
      return reply(json_response(model->triton_config()));
    case Endpoint::model_stats:
      return reply(json_response({{"model_stats", Json::array({model->triton_stats()})}}));
    case Endpoint::metrics: {
      HttpResponse response;
      response.body = metrics_text();
      response.content_type = "text/plain; version=0.0.4";
      return reply(std::move(response));
    }
    case Endpoint::model_infer:
      return handle_infer(std::move(request), reply, route.model, route.version);
    case Endpoint::wrong_method:
      return reply(error_response(405, "method not allowed on " + request.target));
    case Endpoint::not_found:
      return reply(error_response(404, "no such endpoint"));
  }
}

void InferenceServer::handle_infer(HttpRequest&& request, const HttpReply& reply,
                                   const std::string& model_name, const std::string& version) {
  const auto arrived = Clock::now();
  std::string error;
  ServedModel* model = find_model(model_name, version, error);
  if (!model) return reply(error_response(404, error));
  if (!ready_) {
    model->record_failure("not_ready");
    return reply(error_response(503, "server is shutting down or not ready"));
  }
  InferRequest parsed;
  try {
    std::optional<std::size_t> header_length;
    if (const std::string* value = request.header("Inference-Header-Content-Length")) {
      std::size_t length = 0;
      const auto result = std::from_chars(value->data(), value->data() + value->size(), length);
      if (result.ec != std::errc() || result.ptr != value->data() + value->size())
        fail(ErrorCategory::invalid_input,
             "Inference-Header-Content-Length '" + value->substr(0, 40) + "' is not a number");
      header_length = length;
    }
    parsed = parse_infer_request(request.body, header_length, model->config(), options_.request);
  } catch (const RequestTooLarge& too_large) {
    model->record_failure("too_large");
    return reply(error_response(413, too_large.what()));
  } catch (const std::bad_alloc&) {
    model->record_failure("too_large");
    return reply(error_response(413, "request needs more memory than the server can give it"));
  } catch (const Error& bad) {
    model->record_failure("bad_input");
    return reply(error_response(400, bad.what()));
  }
  std::string().swap(request.body);  // the tensor holds the values now
  auto pending = std::make_shared<PendingRequest>();
  pending->shape = parsed.shape;
  pending->data = std::move(parsed.data);
  parsed.data = {};
  if (parsed.timeout_us) pending->deadline = arrived + std::chrono::microseconds(*parsed.timeout_us);
  const bool with_energy = options_.measure_energy && model->config().energy_in_response;
  pending->on_complete = [model, reply, arrived, with_energy, parsed = std::move(parsed)](Outcome&& done) {
    // On the batcher worker: hand the encoding to the connection's IO thread.
    auto outcome = std::make_shared<Outcome>(std::move(done));
    reply.build_on_io_thread([model, arrived, with_energy, parsed, outcome] {
      if (outcome->status != 200) {
        model->record_failure(!outcome->reason.empty() ? outcome->reason
                              : outcome->status == 503 ? "timeout"
                                                       : "internal");
        return error_response(outcome->status, outcome->error);
      }
      ResponseEnergy energy;
      if (with_energy && outcome->energy_source) energy = {outcome->energy_j, outcome->energy_source};
      EncodedResponse encoded = encode_infer_response(model->config(), model->version(), parsed,
                                                      outcome->output_shape, outcome->output, energy);
      HttpResponse response;
      response.body = std::move(encoded.body);
      response.content_type = encoded.content_type;
      if (encoded.header_length)
        response.headers.emplace_back("Inference-Header-Content-Length",
                                      std::to_string(*encoded.header_length));
      model->record_success(std::chrono::duration<double, std::micro>(Clock::now() - arrived).count());
      return response;
    });
  };
  switch (model->batcher().submit(pending)) {
    case DynamicBatcher::Admission::accepted:
      return;
    case DynamicBatcher::Admission::queue_full:
      model->record_failure("queue_full");
      return reply(error_response(503, "queue of model '" + model->config().name + "' is full; retry later"));
    case DynamicBatcher::Admission::stopped:
      model->record_failure("not_ready");
      return reply(error_response(503, "model '" + model->config().name + "' is shutting down"));
  }
}

}  // namespace ipj::serve
