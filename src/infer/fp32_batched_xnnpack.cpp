// The fp32 variant's larger batches on XNNPACK's runtime of the graph IR (a pthreadpool of the run's threads)
// where that is exact and timed faster at load than the engine chosen (MobileNetV2's depthwise convolutions:
// XNNPACK's kernels beat oneDNN's), then raced against it call by call; and batch 1 on such a pool where it
// runs on the calling thread, for calls that come back to back. Limits: one runtime per route and thread
// count (a re-planned server's shrunk plan gets one built and timed on its threads in the background, at
// most 3), for the batch size timed; somewhat smaller batches are padded to it (each runtime's own
// threshold), other sizes run the chosen engine.
#include <torch/types.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine_race.hpp"
#include "graph_models.hpp"
#include "ipj/core/error.hpp"
#include "ipj/core/log.hpp"
#include "ipj/core/number_format.hpp"
#include "ipj/device/machine_load.hpp"
#include "ipj/device/threading.hpp"
#include "ipj/infer/fp32_engine.hpp"
#include "ipj/infer/onednn_runtime.hpp"
#include "ipj/infer/xnnpack_runtime.hpp"

namespace ipj::infer {
namespace {

// Past this the batch's arithmetic takes the load time too (timing both sides costs >= 12 such calls).
constexpr double kMaxTimedBatchMs = 250.0;
// A runtime built for fewer threads is timed on them (>= 14 calls, in the background of a busy server)
// while the chosen engine's full batch is expected to take at most this on them.
constexpr double kMaxLaneTimedBatchMs = 50.0;

using Clock = std::chrono::steady_clock;

// A runtime of the route on a pool of `threads`, raced against `chosen` on its own.
struct RuntimeLane {
  int threads = 1;
  std::int64_t min_rows = 0;                      // the fewest rows padded to the batch on it
  std::shared_ptr<const InferenceModel> runtime;  // null: it could not be built (never tried again)
  std::unique_ptr<EngineRace> race;               // null: XNNPACK whenever the input fits
  std::mutex mutex;  // one call at a time on the runtime (its buffers); the others run `chosen`, not waiting
};

// xnnpack_batch_route's model (xnnpack_runtime.hpp).
class SizedBatchRoute : public InferenceModel {
 public:
  SizedBatchRoute(BatchRouteModels models, BatchRoutePlan plan)
      : models_(std::move(models)), plan_(std::move(plan)) {
    InferenceModel::operator=(*models_.chosen);
    main_lane_.threads = plan_.threads;
    main_lane_.min_rows = plan_.min_rows;
    main_lane_.runtime = models_.xnnpack;
    main_lane_.race = race_for(plan_.threads, plan_.chosen_ms, plan_.xnnpack_ms);
  }
  ~SizedBatchRoute() override {
    if (builder_.joinable()) builder_.join();  // a runtime being built for fewer threads (no call runs now)
  }
  SizedBatchRoute(const SizedBatchRoute&) = delete;
  SizedBatchRoute& operator=(const SizedBatchRoute&) = delete;

  torch::Tensor forward(const torch::Tensor& input) const override {
    const CallEnd call_end(plan_.max_gap_ms > 0.0 ? &last_call_end_ns_ : nullptr);
    const Overlap overlap(running_, started_);
    if (!fits(input) || !call_end.within(plan_.max_gap_ms) || (plan_.alone_only && !overlap.alone_at_start()))
      return models_.chosen->forward(input);
    RuntimeLane* lane = lane_for(std::max(device::caller_openmp_threads(), device::blas_thread_count()));
    if (lane == nullptr || input.size(0) < std::min(lane->min_rows, plan_.batch_shape[0]))
      return models_.chosen->forward(input);
    if (!tame_for_xnnpack(input)) return models_.fallback->forward(input);
    const EngineRace::Pick pick = lane->race ? lane->race->pick() : EngineRace::Pick{};
    if (pick.side == RaceSide::xnnpack) {
      std::unique_lock<std::mutex> lock(lane->mutex, std::try_to_lock);
      if (lock.owns_lock())
        return timed(
            *lane, RaceSide::xnnpack, pick.probe, [&] { return on_runtime(*lane->runtime, input); }, 1.0,
            overlap);
      if (pick.probe) lane->race->cancel_probe();
      return models_.chosen->forward(input);  // another call holds it: not the chosen engine's own pace
    }
    const double full_batch = static_cast<double>(plan_.batch_shape[0]) / static_cast<double>(input.size(0));
    return timed(
        *lane, RaceSide::chosen, pick.probe, [&] { return models_.chosen->forward(input); }, full_batch,
        overlap);
  }

 private:
  // up to batch rows of the sample shape, in float (each lane has its own fewest rows)
  bool fits(const torch::Tensor& input) const {
    const std::vector<std::int64_t>& shape = plan_.batch_shape;
    return input.dim() == static_cast<std::int64_t>(shape.size()) && input.size(0) >= 1 &&
           input.size(0) <= shape[0] && input.scalar_type() == torch::kFloat &&
           input.sizes().slice(1).equals(c10::IntArrayRef(shape).slice(1));
  }

  // The lane for a call on `threads` (the run's plan: ATen's pool for convolutional models, OpenBLAS's for
  // GEMM-bound ones, ATen at 1): the plan's runtime while it has its threads; else one built for `threads`
  // once that is done (the first such call starts building it), or none.
  RuntimeLane* lane_for(int threads) const {
    if (threads >= main_lane_.threads) return &main_lane_;
    if (!models_.xnnpack_for_fewer_threads || threads < 1) return nullptr;
    std::lock_guard<std::mutex> lock(lanes_mutex_);
    for (const std::unique_ptr<RuntimeLane>& lane : fewer_thread_lanes_)
      if (lane->threads == threads) return lane->runtime ? lane.get() : nullptr;
    if (building_ || static_cast<int>(fewer_thread_lanes_.size()) >= kMaxFewerThreadRuntimes) return nullptr;
    building_ = true;
    if (builder_.joinable()) builder_.join();  // the previous build has ended (building_ was false)
    builder_ = std::thread([this, threads, context = log_context()] {
      const LogContext same_context(context);  // the caller's: the model being served
      build_lane(threads);
    });
    return nullptr;
  }

  // On builder_: the runtime for `threads`, then timed on them (time_lane).
  void build_lane(int threads) const {
    const UncountedRuntimeCalls building;  // its check and timing answer no request
    auto lane = std::make_unique<RuntimeLane>();
    lane->threads = threads;
    lane->min_rows = plan_.min_rows;
    std::string reason;
    const Clock::time_point start = Clock::now();
    try {
      const device::CallerOpenMpThreads on_threads(threads);  // its check runs the model on them
      lane->runtime = models_.xnnpack_for_fewer_threads(threads, reason);
    } catch (const std::exception& error) {
      reason = error_cause(error.what());
    }
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (lane->runtime) {
      const std::string timed = time_lane(*lane);
      spdlog::info("{}batch {}: {} for {} thread(s) built in {:.0f} ms (calls on fewer than {}){}",
                   log_prefix(), plan_.batch_shape[0], plan_.runtime_name, threads, ms, plan_.threads, timed);
    } else {
      spdlog::info("{}batch {}: no {} for {} thread(s) ({}): those calls run the chosen engine", log_prefix(),
                   plan_.batch_shape[0], plan_.runtime_name, threads, reason);
    }
    std::lock_guard<std::mutex> lock(lanes_mutex_);
    fewer_thread_lanes_.push_back(std::move(lane));
    building_ = false;
  }

  // A raced plan's lane on fewer threads: its runtime and the chosen engine timed on them (a full batch,
  // alternating, on the builder's thread), which seed its race and set the rows it pads (a pool of two and
  // one thread pay for padding differently: mlp 35 vs 58 of 64 rows); where that batch would take longer
  // than kMaxLaneTimedBatchMs, the plan's timings x plan.threads / threads and its rows. Says what it did.
  std::string time_lane(RuntimeLane& lane) const {
    const double scale = static_cast<double>(plan_.threads) / static_cast<double>(lane.threads);
    lane.race = race_for(lane.threads, plan_.chosen_ms * scale, plan_.xnnpack_ms * scale);
    if (!lane.race) return "";
    if (plan_.chosen_ms * scale > kMaxLaneTimedBatchMs) return "; seeded with the plan's timings";
    torch::NoGradGuard no_grad;
    const std::vector<double> fastest = fastest_alternating_ms(
        {forward_on(models_.chosen, lane.threads), forward_on(lane.runtime, lane.threads)},
        torch::rand(plan_.batch_shape));  // [batch, ...sample] in [0, 1)
    lane.race = race_for(lane.threads, fastest[0], fastest[1]);
    lane.min_rows = padded_min_rows(plan_.batch_shape[0], fastest[0], fastest[1]);
    const std::string timed = "; timed " + format_number("%.3f", fastest[1]) + " ms vs " +
                              format_number("%.3f", fastest[0]) + " ms";
    if (fastest[1] >
        0.9 * fastest[0])  // the race starts on the chosen engine and probes the runtime now and then
      return timed + " on the chosen engine, which runs those calls while it stays faster (raced)";
    return timed + " (chosen engine): batches of " + std::to_string(lane.min_rows) + "-" +
           std::to_string(plan_.batch_shape[0]) + " rows on it, raced against the chosen engine";
  }

  // The race of a lane on `threads` from these ms per full batch; null where the plan has no timings
  // (--fp32-engine xnnpack: XNNPACK whenever the input fits).
  std::unique_ptr<EngineRace> race_for(int threads, double chosen_ms, double xnnpack_ms) const {
    if (!(plan_.chosen_ms > 0.0 && plan_.xnnpack_ms > 0.0)) return nullptr;
    std::string label = "batch " + std::to_string(plan_.batch_shape[0]);
    if (threads != plan_.threads) label += " on " + std::to_string(threads) + " thread(s)";
    return std::make_unique<EngineRace>(chosen_ms, xnnpack_ms, std::move(label), plan_.runtime_name);
  }

  // input [rows <= batch, ...sample] padded with zero rows to the runtime's batch -> the first `rows` answers
  torch::Tensor on_runtime(const InferenceModel& runtime, const torch::Tensor& input) const {
    const std::int64_t rows = input.size(0);
    if (rows == plan_.batch_shape[0]) return runtime.forward(input);
    std::vector<std::int64_t> padding_shape = plan_.batch_shape;
    padding_shape[0] -= rows;
    const torch::Tensor padded = torch::cat({input, torch::zeros(padding_shape, input.options())});
    return runtime.forward(padded).narrow(0, 0, rows);  // [rows, ...]
  }

  // This call among the route's calls: whether another was running when it started, or started while it ran.
  class Overlap {
   public:
    Overlap(std::atomic<int>& running, std::atomic<std::uint64_t>& started)
        : running_(running),
          others_at_start_(running.fetch_add(1)),
          ticket_(started.fetch_add(1) + 1),
          started_(started) {}
    ~Overlap() { running_.fetch_sub(1); }
    Overlap(const Overlap&) = delete;
    Overlap& operator=(const Overlap&) = delete;
    bool alone_at_start() const { return others_at_start_ == 0; }
    bool alone_throughout() const { return others_at_start_ == 0 && started_.load() == ticket_; }

   private:
    std::atomic<int>& running_;
    int others_at_start_;
    std::uint64_t ticket_;
    std::atomic<std::uint64_t>& started_;
  };

  // Stamps the route's last call end (steady clock ns) when it goes out of scope; within(): whether this
  // call started within `gap_ms` of the previous one's end (always without a stamp to keep).
  class CallEnd {
   public:
    explicit CallEnd(std::atomic<std::int64_t>* last_end_ns)
        : last_end_ns_(last_end_ns), start_ns_(last_end_ns ? now_ns() : 0) {}
    ~CallEnd() {
      if (last_end_ns_) last_end_ns_->store(now_ns(), std::memory_order_relaxed);
    }
    CallEnd(const CallEnd&) = delete;
    CallEnd& operator=(const CallEnd&) = delete;
    bool within(double gap_ms) const {
      return !last_end_ns_ ||
             static_cast<double>(start_ns_ - last_end_ns_->load(std::memory_order_relaxed)) <= gap_ms * 1e6;
    }

   private:
    static std::int64_t now_ns() {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
    }
    std::atomic<std::int64_t>* last_end_ns_;
    std::int64_t start_ns_;
  };

  // `call` timed for the race, its time scaled by `to_full_batch` (the chosen engine's time is taken as
  // proportional to the rows); with plan_.alone_only a call that overlapped another is not counted (the
  // route's own concurrency, not the engine, set its pace), and a probe that did runs again at the next call
  template <typename Call>
  torch::Tensor timed(RuntimeLane& lane, RaceSide side, bool probe, const Call& call, double to_full_batch,
                      const Overlap& overlap) const {
    if (!lane.race) return call();
    const Clock::time_point start = Clock::now();
    torch::Tensor output = call();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (!plan_.alone_only || overlap.alone_throughout())
      lane.race->record(side, ms * to_full_batch, probe);
    else if (probe)
      lane.race->cancel_probe();
    return output;
  }

  BatchRouteModels models_;
  BatchRoutePlan plan_;
  // when the route's last call ended (max_gap_ms > 0); long ago at first: the first call runs `chosen`
  mutable std::atomic<std::int64_t> last_call_end_ns_{std::numeric_limits<std::int64_t>::min() / 2};
  mutable std::atomic<int> running_{0};            // calls of the route running now
  mutable std::atomic<std::uint64_t> started_{0};  // calls of the route started so far
  mutable RuntimeLane main_lane_;                  // the plan's runtime, on plan_.threads
  // runtimes built for fewer threads (models_.xnnpack_for_fewer_threads), one per thread count, in the order
  // built; builder_ builds one at a time (building_)
  mutable std::mutex lanes_mutex_;
  mutable std::vector<std::unique_ptr<RuntimeLane>> fewer_thread_lanes_;
  mutable bool building_ = false;
  mutable std::thread builder_;
};

// The chosen engine's batch time as the engine choice measured it (0: not measured).
double chosen_batch_ms(const Fp32EngineChoice& choice) {
  for (const EngineMeasurement& measured : choice.measured)
    if (measured.engine == choice.engine) return measured.batch_ms;
  return 0.0;
}

// The runtimes a batch route can send its batch size to.
enum class BatchRuntimeForm {
  xnnpack_pool,   // one XNNPACK runtime on a pthreadpool
  xnnpack_split,  // the batch's rows split across one-thread XNNPACK runtimes
  onednn,         // oneDNN's primitives on the calling thread's OpenMP threads
};

// A runtime for [batch, ...sample_shape]: XNNPACK's on a pool of `threads` (concurrent calls wait: the route
// keeps them off it), its rows split across `threads` one-thread runtimes, or oneDNN's, checked against
// eager on pixels and normal(0, 2) values; null when it cannot be built or differs (the reason says which).
std::shared_ptr<InferenceModel> checked_runtime(const std::shared_ptr<InferenceModel>& eager,
                                                const GraphIrSource& graph_ir,
                                                const std::vector<std::int64_t>& sample_shape,
                                                std::int64_t batch, int threads, std::string& reason,
                                                BatchRuntimeForm form = BatchRuntimeForm::xnnpack_pool) {
  std::shared_ptr<InferenceModel> runtime;
  double difference = INFINITY;
  try {
    if (form == BatchRuntimeForm::onednn) {
      runtime = onednn_runtime_model(graph_ir(), batch, threads);
    } else if (form == BatchRuntimeForm::xnnpack_split) {
      const quant::Graph graph = graph_ir();
      const RowRuntimeBuilder one_thread = [&graph](std::int64_t rows) {
        return xnnpack_runtime_model(graph, rows, 1);
      };
      runtime = xnnpack_row_split_model(one_thread, batch, threads);
    } else {
      runtime = xnnpack_runtime_model(graph_ir(), batch, threads);
    }
    const Forward reference = [&eager](const torch::Tensor& input) { return eager->forward(input); };
    const Forward candidate = [&runtime](const torch::Tensor& input) { return runtime->forward(input); };
    difference = xnnpack_difference(*eager, *runtime, sample_shape,
                                    fp32_difference(reference, candidate, sample_shape, batch), batch);
  } catch (const std::exception& error) {  // a node XNNPACK cannot take, or it fails on this model
    reason = error_cause(error.what());
    return nullptr;
  }
  if (difference <= kFp32EngineTolerance) return runtime;
  reason = "differs from eager by " + format_number("%.2g", difference) + " (relative)";
  return nullptr;
}

// With RunOptions::replanned_threads: what builds the runtime for a shrunk plan's fewer threads, checked
// against eager as the plan's was.
BatchRouteModels::RuntimeBuilder fewer_threads_builder(
    const RunOptions& run, const std::shared_ptr<InferenceModel>& eager, const GraphIrSource& graph_ir,
    const std::vector<std::int64_t>& sample_shape, std::int64_t batch,
    BatchRuntimeForm form = BatchRuntimeForm::xnnpack_pool) {
  if (!run.replanned_threads) return {};
  return [eager, graph_ir, sample_shape, batch, form](
             int threads, std::string& reason) -> std::shared_ptr<const InferenceModel> {
    return checked_runtime(eager, graph_ir, sample_shape, batch, threads, reason, form);
  };
}

const char* form_name(BatchRuntimeForm form) {
  return form == BatchRuntimeForm::onednn ? "oneDNN runtime" : "XNNPACK runtime";
}

// The runtimes a batch size was timed on beside the chosen engine.
struct TimedRuntimes {
  double chosen_ms = 0.0;
  double best_ms = INFINITY;  // the fastest runtime's
  BatchRuntimeForm best = BatchRuntimeForm::xnnpack_pool;
  std::string forms;  // "; XNNPACK on a pool of 2 2.100 ms, ..." where more than one form was timed
};

// Every runtime form that builds and is exact (`pool`: XNNPACK's on the pool, given; its rows split across
// `threads` one-thread runtimes where the batch has two rows per thread; oneDNN's), timed alternating with
// `chosen` on the same threads; `pool` becomes the fastest (choice.batch_xnnpack_row_parts set for the
// split), choice.batch_xnnpack_ms / batch_onednn_ms record what XNNPACK's and oneDNN's best forms took.
TimedRuntimes time_runtime_forms(const std::shared_ptr<InferenceModel>& chosen,
                                 std::shared_ptr<InferenceModel>& pool,
                                 const std::shared_ptr<InferenceModel>& eager, const GraphIrSource& graph_ir,
                                 const std::vector<std::int64_t>& sample_shape, int threads,
                                 Fp32EngineChoice& choice) {
  const std::int64_t batch = choice.batch;
  std::vector<std::pair<BatchRuntimeForm, std::shared_ptr<InferenceModel>>> candidates;
  if (pool) candidates.emplace_back(BatchRuntimeForm::xnnpack_pool, pool);
  for (const BatchRuntimeForm form : {BatchRuntimeForm::xnnpack_split, BatchRuntimeForm::onednn}) {
    const bool worth = form == BatchRuntimeForm::onednn ? onednn_runtime_available()
                                                        : pool && row_split_worth_timing(batch, threads);
    std::string refused;
    auto runtime =
        worth ? checked_runtime(eager, graph_ir, sample_shape, batch, threads, refused, form) : nullptr;
    if (!refused.empty())
      choice.reason += std::string("; ") + form_name(form) + " at batch " + std::to_string(batch) +
                       " not used: " + cause_once(choice.reason, refused);
    if (runtime) candidates.emplace_back(form, std::move(runtime));
  }
  TimedRuntimes timed;
  if (candidates.empty()) return timed;
  std::vector<Forward> sides{forward_on(chosen, threads)};
  for (const auto& candidate : candidates)
    sides.push_back(forward_on(candidate.second, threads));
  const std::vector<double> fastest =
      fastest_alternating_ms(sides, torch::rand(batch_shape(batch, sample_shape)));
  timed.chosen_ms = fastest[0];
  for (std::size_t index = 0; index < candidates.size(); ++index) {
    const BatchRuntimeForm form = candidates[index].first;
    const double ms = fastest[index + 1];
    double& recorded = form == BatchRuntimeForm::onednn ? choice.batch_onednn_ms : choice.batch_xnnpack_ms;
    recorded = recorded > 0.0 ? std::min(recorded, ms) : ms;
    timed.forms += std::string(index == 0 ? "; " : ", ") +
                   (form == BatchRuntimeForm::xnnpack_pool ? "XNNPACK on a pool of " + std::to_string(threads)
                    : form == BatchRuntimeForm::xnnpack_split
                        ? "XNNPACK rows split across " + std::to_string(threads) + " one-thread runtimes"
                        : std::string("oneDNN")) +
                   " " + format_number("%.3f", ms) + " ms" + onednn_winograd_note(*candidates[index].second);
    if (ms >= timed.best_ms) continue;
    timed.best_ms = ms;
    timed.best = form;
    pool = candidates[index].second;
  }
  if (timed.best == BatchRuntimeForm::xnnpack_split) choice.batch_xnnpack_row_parts = threads;
  return timed;
}

}  // namespace

Forward forward_on(const std::shared_ptr<const InferenceModel>& model, int threads) {
  return [model, threads](const torch::Tensor& input) {
    const device::CallerOpenMpThreads scope(threads);
    return model->forward(input);
  };
}

bool row_split_worth_timing(std::int64_t batch, int threads) {
  return threads >= 2 && batch >= 2 * static_cast<std::int64_t>(threads);
}

std::string row_split_timings(int threads, double pool_ms, double split_ms) {
  return "; one runtime on a pool of " + std::to_string(threads) + " " + format_number("%.3f", pool_ms) +
         " ms, its rows split across " + std::to_string(threads) + " one-thread runtimes " +
         format_number("%.3f", split_ms) + " ms";
}

int run_pool_threads(const RunOptions& run) {
  return std::max(1, run.pool_threads > 0 ? run.pool_threads : device::read_cpu_limits().available_cpus);
}

std::shared_ptr<InferenceModel> with_batch1_xnnpack_pool(const std::shared_ptr<InferenceModel>& eager,
                                                         std::shared_ptr<InferenceModel> chosen,
                                                         const GraphIrSource& graph_ir,
                                                         const std::vector<std::int64_t>& sample_shape,
                                                         const RunOptions& run, Fp32EngineChoice& choice) {
  const int threads = run_pool_threads(run);
  if (choice.requested != Fp32Engine::auto_select || choice.batch1_engine != Fp32Engine::xnnpack ||
      choice.batch1_xnnpack_form != XnnpackForm::runtime || !graph_ir || sample_shape.empty() || threads < 2)
    return chosen;
  std::string refused;
  const auto pool = checked_runtime(eager, graph_ir, sample_shape, 1, threads, refused);
  if (!pool) {
    choice.reason += "; no XNNPACK pool at batch 1: " + cause_once(choice.reason, refused);
    return chosen;
  }
  torch::NoGradGuard no_grad;
  const std::vector<std::int64_t> shape = batch_shape(1, sample_shape);
  const torch::Tensor single = torch::rand(shape);  // [1, ...sample] in [0, 1)
  const std::vector<Forward> sides{forward_on(chosen, threads), forward_on(pool, threads)};
  const std::vector<double> fastest = fastest_alternating_ms(sides, single);
  const std::vector<double> cpu_ms = cpu_ms_per_call(sides, single, fastest[1]);
  choice.batch1_pool_ms = fastest[1];
  choice.batch1_pool_cpu_ratio = cpu_ms[0] > 0.0 && std::isfinite(cpu_ms[1]) ? cpu_ms[1] / cpu_ms[0] : 0.0;
  // the pool spends more CPU per call (its worker's wake-up and hand-offs): it has to buy speed for little
  // more CPU (joules), else the calling thread keeps batch 1
  const bool wins = fastest[1] * kBatch1PoolMinSpeedup <= fastest[0] && choice.batch1_pool_cpu_ratio > 0.0 &&
                    choice.batch1_pool_cpu_ratio <= kBatch1PoolMaxCpuRatio;
  choice.reason +=
      "; batch 1 on XNNPACK's pool of " + std::to_string(threads) +
      (wins ? " when calls come within " + format_number("%.1f", kBatch1PoolGapMs) + " ms of each other: "
            : " kept out: ") +
      format_number("%.3f", fastest[1]) + " ms vs " + format_number("%.3f", fastest[0]) +
      " ms on the calling thread at " + format_number("%.2f", choice.batch1_pool_cpu_ratio) +
      "x its CPU per call";
  if (!wins) return chosen;
  choice.batch1_pool_threads = threads;
  BatchRoutePlan plan{shape, threads, 1, fastest[0], fastest[1]};
  plan.max_gap_ms = kBatch1PoolGapMs;
  plan.alone_only = true;  // concurrent requests: one core each beats a pool of two for one of them
  return xnnpack_batch_route(BatchRouteModels{chosen, pool, chosen}, std::move(plan));
}

bool tame_for_xnnpack(const torch::Tensor& input) {
  if (input.numel() == 0) return true;
  if (!input.device().is_cpu() || input.scalar_type() != torch::kFloat || !input.is_contiguous())
    return input.abs().max().item<float>() <= kLargestXnnpackInput;  // NaN fails too
  const float* values = input.data_ptr<float>();
  const float* const end = values + input.numel();
  bool tame = true;
  for (; values != end; ++values)
    tame &= std::fabs(*values) <= kLargestXnnpackInput;  // NaN fails too; no branch: the loop vectorises
  return tame;
}

std::int64_t padded_min_rows(std::int64_t batch, double chosen_ms, double xnnpack_ms) {
  if (batch <= 2 || !(chosen_ms > 0.0)) return batch;
  const double rows_to_win = std::ceil(static_cast<double>(batch) * xnnpack_ms / (0.9 * chosen_ms));
  return rows_to_win >= static_cast<double>(batch)
             ? batch
             : std::max<std::int64_t>(static_cast<std::int64_t>(rows_to_win), 2);
}

std::shared_ptr<InferenceModel> xnnpack_batch_route(BatchRouteModels models, BatchRoutePlan plan) {
  return std::make_shared<SizedBatchRoute>(std::move(models), std::move(plan));
}

std::shared_ptr<InferenceModel> with_batched_xnnpack(const std::shared_ptr<InferenceModel>& eager,
                                                     std::shared_ptr<InferenceModel> chosen,
                                                     const GraphIrSource& graph_ir,
                                                     const std::vector<std::int64_t>& sample_shape,
                                                     const RunOptions& run, Fp32EngineChoice& choice) {
  choice.batch_engine = choice.engine;
  const std::int64_t batch = choice.batch;
  const bool forced = choice.requested == Fp32Engine::xnnpack;  // its runtime, checked (LibTorch's XNNPACK
                                                                // graph may have differed: eager then)
  const bool onednn = !forced && onednn_runtime_available();
  if (!graph_ir || sample_shape.empty() || batch <= 1 || (!xnnpack_runtime_available() && !onednn))
    return chosen;
  if (!run.batched_xnnpack) {
    choice.reason += "; no runtime for batch " + std::to_string(batch) + " (no row runs that size)";
    return chosen;
  }
  if (!forced && chosen_batch_ms(choice) > kMaxTimedBatchMs) {
    choice.reason += "; no runtime tried at batch " + std::to_string(batch) + " (" +
                     format_number("%.0f", chosen_batch_ms(choice)) + " ms per batch)";
    return chosen;
  }
  const int threads = run_pool_threads(run);
  const std::string at_batch = "XNNPACK runtime at batch " + std::to_string(batch);
  std::string refused;
  auto runtime = xnnpack_runtime_available()
                     ? checked_runtime(eager, graph_ir, sample_shape, batch, threads, refused)
                     : nullptr;
  if (!runtime && !refused.empty())
    choice.reason += "; " + at_batch + " not used: " + cause_once(choice.reason, refused);
  if (!runtime && !onednn) return chosen;
  choice.batch_xnnpack_threads = threads;
  const std::vector<std::int64_t> shape = batch_shape(batch, sample_shape);
  const std::string on_threads = ", " + std::to_string(threads) + " thread(s)";
  if (forced) {  // larger batches on XNNPACK's operators, batch `batch` on its runtime
    choice.batch_engine = Fp32Engine::xnnpack;
    choice.batch_xnnpack_min_rows = batch;
    choice.reason += "; batch " + std::to_string(batch) + " on XNNPACK runtime (checked" + on_threads + ")";
    if (run.replanned_threads)
      choice.reason += "; a runtime for fewer threads is built when the plan shrinks";
    return xnnpack_batch_route(
        BatchRouteModels{chosen, runtime, eager,
                         fewer_threads_builder(run, eager, graph_ir, sample_shape, batch)},
        BatchRoutePlan{shape, threads, batch});
  }
  torch::NoGradGuard no_grad;
  const TimedRuntimes timed =
      time_runtime_forms(chosen, runtime, eager, graph_ir, sample_shape, threads, choice);
  if (!runtime) return chosen;  // nothing built, or exact (the reason says why)
  const std::vector<double> fastest{timed.chosen_ms, timed.best_ms};
  // the same threads on both sides: the runtime has to be >= 10% faster (no flip-flopping between loads)
  const bool wins = fastest[1] <= 0.9 * fastest[0];
  choice.reason += std::string("; ") + form_name(timed.best) + " at batch " + std::to_string(batch) +
                   (wins ? " runs it: " : " kept out: ") + format_number("%.3f", fastest[1]) + " ms vs " +
                   format_number("%.3f", fastest[0]) + " ms (" + choice_name(choice.engine) + ")" +
                   on_threads + timed.forms;
  if (!wins) return chosen;
  choice.batch_engine = timed.best == BatchRuntimeForm::onednn ? Fp32Engine::onednn : Fp32Engine::xnnpack;
  // Smaller batches (a server's partial ones) padded with zero rows up to `batch` where that still wins by
  // the same margin, the chosen engine's time taken as proportional to the rows (an underestimate where it
  // has a fixed cost per call). Never batch 1: its own route (one thread or XNNPACK on the calling thread)
  // decides.
  choice.batch_xnnpack_min_rows = padded_min_rows(batch, fastest[0], fastest[1]);
  if (choice.batch_xnnpack_min_rows < batch)
    choice.reason += "; batches of " + std::to_string(choice.batch_xnnpack_min_rows) + "-" +
                     std::to_string(batch - 1) + " padded to it";
  if (run.replanned_threads) choice.reason += "; a runtime for fewer threads is built when the plan shrinks";
  BatchRoutePlan plan{shape, threads, choice.batch_xnnpack_min_rows, fastest[0], fastest[1]};
  plan.runtime_name = timed.best == BatchRuntimeForm::onednn          ? "oneDNN's runtime"
                      : timed.best == BatchRuntimeForm::xnnpack_split ? "XNNPACK's row split"
                                                                      : "XNNPACK's runtime";
  return xnnpack_batch_route(
      BatchRouteModels{chosen, runtime, chosen,
                       fewer_threads_builder(run, eager, graph_ir, sample_shape, batch, timed.best)},
      std::move(plan));
}

std::shared_ptr<InferenceModel> with_forced_onednn(const std::shared_ptr<InferenceModel>& eager,
                                                   std::shared_ptr<InferenceModel> chosen,
                                                   const GraphIrSource& graph_ir,
                                                   const std::vector<std::int64_t>& sample_shape,
                                                   const RunOptions& run, Fp32EngineChoice& choice) {
  const std::int64_t batch = std::max<std::int64_t>(run.fp32_engine_batch, 1);
  std::string refused = "this model has no graph IR";
  const std::shared_ptr<InferenceModel> runtime =
      graph_ir && !sample_shape.empty()
          ? checked_runtime(eager, graph_ir, sample_shape, batch, run_pool_threads(run), refused,
                            BatchRuntimeForm::onednn)
          : nullptr;
  if (!runtime)
    fail(ErrorCategory::unsupported, "--fp32-engine onednn: oneDNN's runtime of this model at batch " +
                                         std::to_string(batch) + " cannot run (" + refused +
                                         "); --fp32-engine auto or frozen run it");
  choice.batch = batch;
  choice.batch_engine = Fp32Engine::onednn;
  choice.batch_xnnpack_min_rows = batch;
  choice.reason += "; batch " + std::to_string(batch) + " on oneDNN's runtime (checked), as asked" +
                   onednn_winograd_note(*runtime);
  BatchRoutePlan plan{batch_shape(batch, sample_shape), run_pool_threads(run), batch};
  plan.runtime_name = "oneDNN's runtime";
  return xnnpack_batch_route(BatchRouteModels{std::move(chosen), runtime, eager}, std::move(plan));
}

}  // namespace ipj::infer
