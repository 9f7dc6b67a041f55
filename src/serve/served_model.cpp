// Batch execution, statistics and their Triton / Prometheus renderings.
#include "ipj/serve/served_model.hpp"
#include "ipj/infer/xnnpack_runtime.hpp"

#include <torch/torch.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <optional>
#include <sstream>

#include "ipj/core/error.hpp"
#include "ipj/core/log.hpp"

namespace ipj::serve {
namespace {

std::int64_t count_non_finite(const float* values, std::int64_t count) {
  std::int64_t non_finite = 0;
  for (std::int64_t index = 0; index < count; ++index)
    non_finite += std::isfinite(values[index]) ? 0 : 1;
  return non_finite;
}

double microseconds_between(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double, std::micro>(end - start).count();
}

std::int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

EnergyLedger::Reading EnergyLedger::take(double busy_s) {
  return take_at(std::chrono::duration<double>(Clock::now() - epoch_).count(), busy_s);
}

EnergyLedger::Reading EnergyLedger::take_at(double now_s, double busy_s) {
  if (!read_total_) return {};
  std::lock_guard<std::mutex> lock(mutex_);
  Reading reading = take_locked(now_s, busy_s);
  // What the meters counted beyond the batch's own energy was spent between batches.
  idle_j_ += std::max(0.0, reading.total_j - reading.busy_j);
  idle_source_ = reading.source;
  return reading;
}

EnergyLedger::Reading EnergyLedger::idle() {
  return idle_at(std::chrono::duration<double>(Clock::now() - epoch_).count());
}

EnergyLedger::Reading EnergyLedger::idle_at(double now_s) {
  if (!read_total_) return {};
  std::lock_guard<std::mutex> lock(mutex_);
  const Reading since_last = take_locked(now_s, 0.0);  // no batch ran since the last attribution
  idle_j_ += since_last.total_j;
  idle_source_ = since_last.source;
  Reading reading;
  reading.total_j = idle_j_;
  reading.source = idle_source_;
  reading.time_s = now_s;
  return reading;
}

EnergyLedger::Reading EnergyLedger::take_locked(double now_s, double busy_s) {
  Reading reading = read_total_();
  if (reading.time_s >= 0.0 && reading.time_s > sample_time_s_) {
    if (sample_time_s_ >= 0.0)
      power_w_ = std::max(0.0, (reading.total_j - sample_j_) / (reading.time_s - sample_time_s_));
    sample_j_ = reading.total_j;
    sample_time_s_ = reading.time_s;
  }
  double estimate = reading.total_j;
  if (reading.time_s >= 0.0) estimate += power_w_ * std::clamp(now_s - reading.time_s, 0.0, 1.0);
  // A glitch back or an overshoot: charge nothing until caught up.
  estimate = std::max(estimate, attributed_j_);
  reading.total_j = estimate - attributed_j_;
  attributed_j_ = estimate;
  // The power: between the last two samples, else the average since the start, else unknown (tests).
  const double power_w = power_w_ > 0.0 ? power_w_ : sample_time_s_ > 0.0 ? sample_j_ / sample_time_s_ : -1.0;
  reading.busy_j = power_w >= 0.0 ? power_w * std::max(0.0, busy_s) : reading.total_j;
  return reading;
}

ServedModel::ServedModel(ModelConfig config, EnergyLedger& ledger, ServeThreads* threads)
    : config_(std::move(config)), ledger_(ledger), threads_(threads) {
  version_ = config_.latest_version();
  infer::LoadOptions options;
  options.inputs.input_shape = config_.sample_shape();
  // max_batch_size 0 with a variable leading dimension ([-1, 1, 28, 28]): that dimension is each request's
  // batch, the rest is the sample the fp32 engines are checked and timed on (not [1, 1, 28, 28] as one
  // sample)
  if (config_.batching.max_batch_size == 0 && options.inputs.input_shape.size() >= 2 &&
      options.inputs.input_shape.front() == -1)
    options.inputs.input_shape.erase(options.inputs.input_shape.begin());
  for (auto& dim : options.inputs.input_shape)
    if (dim == -1) dim = 1;
  options.inputs.mean = config_.mean;
  options.run.fp32_engine_batch = std::clamp<std::int64_t>(config_.batching.max_batch_size, 1, 64);
  options.run.pool_threads = threads_ ? threads_->fixed_threads() : 0;  // batches run on --threads N
  // a plan shrunk while serving: the XNNPACK runtimes built for the CPUs available get siblings for fewer
  options.run.replanned_threads = threads_ && threads_->replans();
  options.inputs.std = config_.std;
  options.run.engine = config_.engine;
  options.run.prefer = config_.prefer;
  const std::string path = config_.model_path(version_);
  try {
    options.run.variant =
        infer::parse_variant(config_.variant);  // the config's text: its errors name the model
    model_ = infer::load_inference_model(path, options);
    if (model_->fp32_engine)
      spdlog::info("model '{}' version {}: fp32 runs {} ({})", config_.name, version_,
                   choice_name(model_->fp32_engine->engine), model_->fp32_engine->reason);
    else if (model_->batch1_threads && !model_->batch1_threads->describe().empty())
      spdlog::info("model '{}' version {}: {} {}", config_.name, version_, choice_name(model_->variant),
                   model_->batch1_threads->describe());
    if (model_->int8_batch_engine)
      spdlog::info("model '{}' version {}: {}", config_.name, version_, model_->int8_batch_engine->reason);
  } catch (const Error& error) {
    fail(error.category(), "model '" + config_.name + "': " + error.what());
  } catch (const std::exception& error) {  // LibTorch or the model itself, on the configured input shape
    fail(ErrorCategory::invalid_input,
         "model '" + config_.name + "' cannot be loaded for the input shape " + configured_shape_text() +
             " of its config.json: " + error_cause(error.what()) + configured_shape_hint());
  }
  // Warm-up: one batch of one sample; checks that the output fits the config (its calls, and the batch's
  // below, are left out of ipj_xnnpack_runtime_calls_total: it counts what answered requests).
  const infer::UncountedRuntimeCalls warm_up;
  std::vector<std::int64_t> shape{1};
  for (std::int64_t dim : config_.sample_shape())
    shape.push_back(dim == -1 ? 1 : dim);
  if (config_.batching.max_batch_size == 0) shape.erase(shape.begin());
  torch::Tensor output;
  try {
    output = model_->forward(torch::zeros(shape));
  } catch (const std::exception& error) {  // c10::Error, or ipj's own graph and int8 executors
    const std::string cause = error_cause(error.what());
    if (infer::is_unservable_answer(cause))  // it ran on that shape: the shape is not the cause
      fail(ErrorCategory::invalid_input, "model '" + config_.name + "': " + cause);
    fail(ErrorCategory::invalid_input, "model '" + config_.name +
                                           "' fails on an input of the configured shape " +
                                           configured_shape_text() + ": " + cause + configured_shape_hint());
  }
  const auto& expected = config_.output.shape;
  bool fits = output.dim() == static_cast<std::int64_t>(expected.size());
  for (std::size_t dim = 0; fits && dim < expected.size(); ++dim)
    fits = expected[dim] == -1 || expected[dim] == output.size(static_cast<std::int64_t>(dim));
  if (output.defined() && !torch::isfinite(output).all().item<bool>())
    spdlog::warn(
        "model '{}' version {} returns non-finite values (NaN or Inf) on an all-zero warm-up input: "
        "requests whose outputs are not finite will be answered 500 (reason non_finite_output); "
        "check {} (NaN weights?)",
        config_.name, version_, path);
  if (!fits) {
    std::ostringstream got;
    got << output.sizes();
    fail(ErrorCategory::invalid_input, "model '" + config_.name + "' returns shape " + got.str() +
                                           ", which does not fit output '" + config_.output.name +
                                           "' of config.json");
  }
  warn_if_batches_fail(path);
  batcher_ = std::make_unique<DynamicBatcher>(config_.batching,
                                              [this](std::vector<RequestPtr>& batch) { execute(batch); });
}

// "[-1, 1, -1, -1] (tried as [1, 1, 1, 1])": config.json's input shape with the batch dimension, and what ipj
// fed.
std::string ServedModel::configured_shape_text() const {
  std::string given = config_.batching.max_batch_size > 0 ? "-1" : "", tried = given.empty() ? "" : "1";
  bool variable = false;
  for (const std::int64_t dim : config_.sample_shape()) {
    given += (given.empty() ? "" : ", ") + std::to_string(dim);
    tried += (tried.empty() ? "" : ", ") + std::to_string(dim == -1 ? 1 : dim);
    variable = variable || dim == -1;
  }
  return "[" + given + "]" + (variable ? " (tried as [" + tried + "])" : "");
}

std::string ServedModel::configured_shape_hint() const {
  for (const std::int64_t dim : config_.sample_shape())
    if (dim == -1)
      return "; a -1 size is tried as 1: give the sizes the model needs in config.json's inputs shape "
             "(e.g. [-1, 1, 28, 28])";
  return "; check config.json's inputs shape against what the model takes";
}

void ServedModel::warn_if_batches_fail(const std::string& path) const {
  const std::int64_t rows = std::min<std::int64_t>(config_.batching.max_batch_size, 64);
  if (rows <= 1) return;
  std::vector<std::int64_t> shape{rows};
  for (std::int64_t dim : config_.sample_shape())
    shape.push_back(dim == -1 ? 1 : dim);
  try {
    model_->forward(torch::zeros(shape));
  } catch (const std::exception& error) {  // batch 1 works (the warm-up above): only batched requests fail
    spdlog::warn(
        "model '{}' version {} fails on a batch of {} ({}), though one sample works: requests the dynamic "
        "batcher puts together will be answered 500; set max_batch_size to 1 in its config.json or make {} "
        "accept a batch dimension",
        config_.name, version_, rows, error_cause(error.what()), path);
  }
}

ServedModel::~ServedModel() {
  if (batcher_) batcher_->stop();
}

void ServedModel::execute(std::vector<RequestPtr>& batch) {
  const LogContext about_this_model("model '" + config_.name + "'");  // the engine routes' log lines
  const Clock::time_point formed = Clock::now();
  std::int64_t rows = 0;
  for (const RequestPtr& request : batch)
    rows += request->rows();
  const bool batched = config_.batching.max_batch_size > 0;
  std::vector<std::int64_t> shape = batch.front()->shape;
  if (batched) shape[0] = rows;
  torch::Tensor input = torch::empty(shape);  // [rows, ...sample]
  float* destination = input.data_ptr<float>();
  for (const RequestPtr& request : batch) {
    std::memcpy(destination, request->data.data(), request->data.size() * sizeof(float));
    destination += request->data.size();
  }
  torch::Tensor output;  // [rows, ...]
  {
    std::optional<ServeThreads::BatchScope> threads;
    if (threads_ != nullptr) threads.emplace(threads_->enter_batch());
    output = model_->forward(input).contiguous();
  }
  const Clock::time_point done = Clock::now();
  const double compute_us = microseconds_between(formed, done);
  const EnergyLedger::Reading energy = ledger_.take(compute_us * 1e-6);
  if (batched && (output.dim() == 0 || output.size(0) != rows))
    throw std::runtime_error("model returned " + std::to_string(output.dim() ? output.size(0) : 0) +
                             " rows for " + std::to_string(rows));
  const std::int64_t values_per_row = batched ? output.numel() / rows : output.numel();
  const float* values = output.data_ptr<float>();
  // Each request's share of the batch's own energy: what its answer carries and what /metrics sums.
  std::vector<double> shares;
  double batch_energy_j = 0.0;
  for (const RequestPtr& request : batch) {
    shares.push_back(energy.busy_j * static_cast<double>(request->rows()) / static_cast<double>(rows));
    batch_energy_j += shares.back();
  }
  {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    stats_.inference_count += rows;
    stats_.execution_count += 1;
    stats_.compute_us += compute_us;
    stats_.energy_j += batch_energy_j;
    stats_.energy_source = energy.source;
    auto& bucket = stats_.batch_sizes[rows];
    bucket.first += 1;
    bucket.second += compute_us;
    stats_.last_inference_ms = unix_ms();
    for (const RequestPtr& request : batch)
      stats_.queue_us += microseconds_between(request->enqueued, formed);
  }
  for (std::size_t index = 0; index < batch.size(); ++index) {
    const RequestPtr& request = batch[index];
    Outcome outcome;
    outcome.queue_us = microseconds_between(request->enqueued, formed);
    outcome.compute_us = compute_us;
    outcome.batch_rows = rows;
    outcome.energy_j = shares[index];
    outcome.output_shape.assign(output.sizes().begin(), output.sizes().end());
    if (batched) outcome.output_shape[0] = request->rows();
    const std::int64_t count = batched ? values_per_row * request->rows() : values_per_row;
    const std::int64_t non_finite = count_non_finite(values, count);
    if (non_finite > 0) {  // NaN would leave as JSON null: an answer that means nothing
      outcome.status = 500;
      outcome.reason = "non_finite_output";
      outcome.error = non_finite_message(non_finite, count);
    } else {
      outcome.output.assign(values, values + count);
    }
    values += count;
    outcome.energy_source = energy.source;
    request->complete(std::move(outcome));
  }
}

std::string ServedModel::non_finite_message(std::int64_t non_finite, std::int64_t count) const {
  return "model '" + config_.name + "' version " + version_ + " returned " + std::to_string(non_finite) +
         " non-finite output value(s) (NaN or Inf) of " + std::to_string(count) +
         " for this request; nothing is answered rather than meaningless numbers: check the model file "
         "(e.g. NaN weights from a diverged training run) and its inputs";
}

void ServedModel::record_success(double request_us) {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  stats_.request_success += 1;
  stats_.request_us += request_us;
  const double seconds = request_us * 1e-6;
  const auto bucket =
      std::lower_bound(kLatencyBucketsS.begin(), kLatencyBucketsS.end(), seconds);  // first bound >= it
  stats_.latency_buckets[static_cast<std::size_t>(bucket - kLatencyBucketsS.begin())] += 1;
}

void ServedModel::record_failure(const std::string& reason) {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  stats_.request_failure[reason] += 1;
}

ModelStatistics ServedModel::statistics() const {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  return stats_;
}

Json ServedModel::metadata() const {
  auto tensor = [](const TensorSpec& spec) {
    return Json{{"name", spec.name}, {"datatype", spec.datatype}, {"shape", spec.shape}};
  };
  return {{"name", config_.name},
          {"versions", config_.versions},
          {"platform", model_->format == infer::ModelFormat::torchscript ? "pytorch_libtorch"
                       : model_->format == infer::ModelFormat::ipj_int8  ? "ipj_int8"
                                                                         : "ipj_checkpoint"},
          {"inputs", Json::array({tensor(config_.input)})},
          {"outputs", Json::array({tensor(config_.output)})}};
}

Json ServedModel::triton_config() const {
  const bool batched = config_.batching.max_batch_size > 0;
  auto tensor = [batched](const TensorSpec& spec) {
    std::vector<std::int64_t> dims = spec.shape;
    if (batched) dims.erase(dims.begin());  // Triton's dims exclude the batch dimension
    return Json{{"name", spec.name}, {"data_type", "TYPE_" + spec.datatype}, {"dims", dims}};
  };
  Json config = {
      {"name", config_.name},
      {"platform", "pytorch_libtorch"},
      {"backend", "ipj"},
      {"max_batch_size", config_.batching.max_batch_size},
      {"input", Json::array({tensor(config_.input)})},
      {"output", Json::array({tensor(config_.output)})},
      {"instance_group", Json::array({{{"count", config_.batching.instances}, {"kind", "KIND_CPU"}}})},
      {"parameters", {{"variant", {{"string_value", choice_name(model_->variant)}}}}}};
  if (config_.batching.max_queue_delay_us > 0 || !config_.batching.preferred_batch_sizes.empty())
    config["dynamic_batching"] = {{"preferred_batch_size", config_.batching.preferred_batch_sizes},
                                  {"max_queue_delay_microseconds", config_.batching.max_queue_delay_us}};
  return config;
}

Json ServedModel::triton_stats() const {
  const ModelStatistics stats = statistics();
  auto duration = [](std::int64_t count, double us) {
    return Json{{"count", count}, {"ns", static_cast<std::int64_t>(us * 1000.0)}};
  };
  std::int64_t failures = 0;
  for (const auto& [reason, count] : stats.request_failure)
    failures += count;
  Json batches = Json::array();
  for (const auto& [rows, bucket] : stats.batch_sizes)
    batches.push_back({{"batch_size", rows}, {"compute_infer", duration(bucket.first, bucket.second)}});
  return {{"name", config_.name},
          {"version", version_},
          {"last_inference", stats.last_inference_ms},
          {"inference_count", stats.inference_count},
          {"execution_count", stats.execution_count},
          {"inference_stats",
           {{"success", duration(stats.request_success, stats.request_us)},
            {"fail", duration(failures, 0.0)},
            {"queue", duration(stats.request_success, stats.queue_us)},
            {"compute_infer", duration(stats.execution_count, stats.compute_us)}}},
          {"batch_stats", batches},
          {"energy",
           {{"joules", stats.energy_j}, {"source", energy::reported_source_name(stats.energy_source)}}}};
}

std::string prometheus_metrics(const std::vector<std::unique_ptr<ServedModel>>& models, double usd_per_kwh) {
  std::ostringstream out;
  out.precision(15);
  auto header = [&](const char* name, const char* type, const char* help) {
    out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
  };
  std::vector<std::pair<const ServedModel*, ModelStatistics>> all;
  for (const auto& model : models)
    all.emplace_back(model.get(), model->statistics());
  auto labels = [](const ServedModel& model) {
    return "model=\"" + model.config().name + "\",version=\"" + model.version() + "\"";
  };
  header("ipj_request_success_total", "counter", "Successful inference requests");
  for (const auto& [model, stats] : all)
    out << "ipj_request_success_total{" << labels(*model) << "} " << stats.request_success << "\n";
  header("ipj_request_failure_total", "counter", "Failed inference requests by reason");
  for (const auto& [model, stats] : all)
    for (const auto& [reason, count] : stats.request_failure)
      out << "ipj_request_failure_total{" << labels(*model) << ",reason=\"" << reason << "\"} " << count
          << "\n";
  header("ipj_inference_count_total", "counter", "Inferences (batch rows) executed");
  for (const auto& [model, stats] : all)
    out << "ipj_inference_count_total{" << labels(*model) << "} " << stats.inference_count << "\n";
  header("ipj_execution_count_total", "counter",
         "Model executions (batches); inference/execution = average batch");
  for (const auto& [model, stats] : all)
    out << "ipj_execution_count_total{" << labels(*model) << "} " << stats.execution_count << "\n";
  header("ipj_queue_duration_us_total", "counter", "Microseconds requests waited in the batcher queue");
  for (const auto& [model, stats] : all)
    out << "ipj_queue_duration_us_total{" << labels(*model) << "} " << stats.queue_us << "\n";
  header("ipj_compute_duration_us_total", "counter", "Microseconds spent executing batches");
  for (const auto& [model, stats] : all)
    out << "ipj_compute_duration_us_total{" << labels(*model) << "} " << stats.compute_us << "\n";
  header("ipj_request_duration_us_total", "counter",
         "Microseconds from request arrival to reply (successes)");
  for (const auto& [model, stats] : all)
    out << "ipj_request_duration_us_total{" << labels(*model) << "} " << stats.request_us << "\n";
  header("ipj_request_duration_seconds", "histogram",
         "Seconds from request arrival to reply (successes), for histogram_quantile");
  for (const auto& [model, stats] : all) {
    std::int64_t cumulative = 0;
    for (std::size_t bucket = 0; bucket < stats.latency_buckets.size(); ++bucket) {
      cumulative += stats.latency_buckets[bucket];
      out << "ipj_request_duration_seconds_bucket{" << labels(*model) << ",le=\"";
      if (bucket < kLatencyBucketsS.size())
        out << kLatencyBucketsS[bucket];
      else
        out << "+Inf";
      out << "\"} " << cumulative << "\n";
    }
    out << "ipj_request_duration_seconds_sum{" << labels(*model) << "} " << stats.request_us * 1e-6 << "\n";
    out << "ipj_request_duration_seconds_count{" << labels(*model) << "} " << cumulative << "\n";
  }
  header("ipj_pending_requests", "gauge", "Requests waiting in the batcher queue");
  for (const auto& model : models)
    out << "ipj_pending_requests{" << labels(*model) << "} "
        << const_cast<ServedModel&>(*model).batcher().pending() << "\n";
  header("ipj_model_energy_joules_total", "counter",
         "Joules of the model's batches, the sum of its requests' energy_j (idle time: "
         "ipj_idle_energy_joules_total)");
  for (const auto& [model, stats] : all)
    out << "ipj_model_energy_joules_total{" << labels(*model) << ",source=\""
        << energy::reported_source_name(stats.energy_source) << "\"} " << stats.energy_j << "\n";
  header("ipj_model_energy_per_inference_joules", "gauge",
         "Joules per inference so far, as the answers' energy_j (idle time excluded)");
  for (const auto& [model, stats] : all)
    out << "ipj_model_energy_per_inference_joules{" << labels(*model) << ",source=\""
        << energy::reported_source_name(stats.energy_source) << "\"} "
        << (stats.inference_count ? stats.energy_j / stats.inference_count : 0.0) << "\n";
  if (usd_per_kwh >= 0) {
    header("ipj_cost_per_1000_inferences_usd", "gauge",
           "Electricity cost per 1000 inferences at --usd-per-kwh");
    for (const auto& [model, stats] : all)
      out << "ipj_cost_per_1000_inferences_usd{" << labels(*model) << "} "
          << (stats.inference_count ? stats.energy_j / stats.inference_count * 1000.0 / 3.6e6 * usd_per_kwh
                                    : 0.0)
          << "\n";
  }
  return out.str();
}

}  // namespace ipj::serve
