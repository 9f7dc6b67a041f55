// One loaded model version behind the server: the InferenceModel, its dynamic batcher, the executor that
// turns a batch of requests into one forward pass (a request whose outputs are not all finite fails with a
// 500 instead of an answer of nulls), and the statistics (/stats, /metrics) including energy per request.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "ipj/core/json_io.hpp"
#include "ipj/energy/measurement.hpp"
#include "ipj/infer/inference_model.hpp"
#include "ipj/serve/dynamic_batcher.hpp"
#include "ipj/serve/model_repository.hpp"
#include "ipj/serve/serve_threads.hpp"

namespace ipj::serve {

// Energy attribution without double counting: after each batch the joules the meters counted since the
// previous attribution (any model) are split in two: the batch's own energy (the recent power times its
// compute time), charged to the batch's model and split over its requests by rows (what their answers carry),
// and the rest, idle energy between batches, kept apart as the server's idle total (idle()). So a model's
// energy per inference in /metrics is the mean of what its answers said, and model totals + idle add up to
// what the meters saw (up to the extrapolation below). The server reads the monitor's latest sample (taken
// every 100 ms) instead of the meters, keeping file reads off the request path, and extrapolates from that
// sample with the power between the last two samples (at most 1 s ahead), so each batch gets its share
// instead of one batch per sampling period getting all of it. The attributed total never decreases and
// trails or leads the meters by at most one extrapolation.
class EnergyLedger {
 public:
  struct Reading {
    double total_j = 0.0;
    energy::ReportedSource source;  // none: no energy measurement
    double time_s = -1.0;           // when total_j was sampled, on the ledger's clock (seconds); < 0: unknown
    double busy_j = 0.0;  // take(): the busy interval's own energy (power x busy_s; total_j if no time)
  };
  // `read_total` returns the cumulative energy since `epoch`; null = no energy measurement.
  explicit EnergyLedger(std::function<Reading()> read_total, Clock::time_point epoch = Clock::now())
      : read_total_(std::move(read_total)), epoch_(epoch) {}
  // Joules since the last call (total_j), the energy of the last busy_s seconds alone (busy_j: the power
  // between the last two samples, or the average since the start, times busy_s), and their source.
  Reading take(double busy_s = 0.0);
  // take() at a given time on the ledger's clock (tests).
  Reading take_at(double now_s, double busy_s = 0.0);
  // The idle joules so far (total_j; what the meters counted outside any batch, up to now) and their source.
  Reading idle();
  Reading idle_at(double now_s);

 private:
  Reading take_locked(double now_s, double busy_s);

  std::function<Reading()> read_total_;
  Clock::time_point epoch_;
  std::mutex mutex_;
  double idle_j_ = 0.0;  // the part of the attributed energy outside the batches' busy time
  energy::ReportedSource idle_source_;
  double attributed_j_ = 0.0;  // charged to batches or idle so far
  double sample_j_ = 0.0;      // the latest distinct sample
  double sample_time_s_ = -1.0;
  double power_w_ = 0.0;  // between the last two samples
};

// Upper bounds (seconds) of the request-latency histogram's buckets, Prometheus' `le` labels (+Inf implied).
inline constexpr std::array<double, 15> kLatencyBucketsS = {
    0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0};

struct ModelStatistics {
  std::int64_t request_success = 0;
  std::map<std::string, std::int64_t>
      request_failure;               // by reason: bad_input, queue_full, timeout, internal, ...
  std::int64_t inference_count = 0;  // rows
  std::int64_t execution_count = 0;  // batches
  double queue_us = 0.0, compute_us = 0.0, request_us = 0.0;
  // Successful requests by latency: [i] counts those in (kLatencyBucketsS[i-1], kLatencyBucketsS[i]], the
  // last entry those above every bound (not cumulative; Prometheus' cumulative buckets are summed when
  // rendered).
  std::array<std::int64_t, kLatencyBucketsS.size() + 1> latency_buckets{};
  double energy_j = 0.0;  // the batches' own energy: the sum of every executed request's energy_j
  energy::ReportedSource energy_source;
  std::map<std::int64_t, std::pair<std::int64_t, double>> batch_sizes;  // rows -> (executions, compute us)
  std::int64_t last_inference_ms = 0;                                   // Unix epoch milliseconds
};

class ServedModel {
 public:
  // Loads the latest version, builds the batcher and runs a warm-up batch that also checks the output shape
  // against the config. Throws ipj::Error naming the model when anything does not fit.
  // `threads`: the server's plan, entered around each batch (nullptr: the worker's threads as they are).
  ServedModel(ModelConfig config, EnergyLedger& ledger, ServeThreads* threads = nullptr);
  ~ServedModel();

  const ModelConfig& config() const { return config_; }
  const std::string& version() const { return version_; }
  const infer::InferenceModel& model() const { return *model_; }
  DynamicBatcher& batcher() { return *batcher_; }

  void record_success(double request_us);
  void record_failure(const std::string& reason);
  ModelStatistics statistics() const;
  // Triton's /v2/models/{m}/stats entry and /config object.
  Json triton_stats() const;
  Json triton_config() const;
  Json metadata() const;  // KServe v2 model metadata

 private:
  void execute(std::vector<RequestPtr>& batch);
  // Runs one zero batch of min(max_batch_size, 64) rows; a model that fails on it gets a warning that says
  // batched requests will fail and how to fix the config or the model.
  void warn_if_batches_fail(const std::string& path) const;
  // For load and warm-up errors: config.json's input shape and what was fed; how to fix the shape.
  std::string configured_shape_text() const;
  std::string configured_shape_hint() const;
  std::string non_finite_message(std::int64_t non_finite, std::int64_t count) const;

  ModelConfig config_;
  std::string version_;
  infer::InferenceModelPtr model_;
  EnergyLedger& ledger_;
  ServeThreads* threads_;
  mutable std::mutex stats_mutex_;
  ModelStatistics stats_;
  std::unique_ptr<DynamicBatcher> batcher_;  // last: its workers use everything above
};

// Prometheus text for all models (+ cost per 1000 inferences when usd_per_kwh >= 0).
std::string prometheus_metrics(const std::vector<std::unique_ptr<ServedModel>>& models, double usd_per_kwh);

}  // namespace ipj::serve
