// The route of a batch size to a runtime built for it (XNNPACK's or oneDNN's), raced call by call against the
// engine chosen, with runtimes for a shrunk thread plan's fewer threads built in the background. Limits: one
// runtime per thread count (at most kMaxFewerThreadRuntimes besides the plan's), for the batch size it was
// built for; somewhat smaller batches are padded to it, other sizes run the chosen engine.
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
#include "ipj/device/threading.hpp"
#include "ipj/infer/fp32_engine.hpp"
#include "ipj/infer/xnnpack_runtime.hpp"

namespace ipj::infer {
namespace {

// A runtime built for fewer threads is timed on them (>= 14 calls, in the background of a busy server)
// while the chosen engine's full batch is expected to take at most this on them.
constexpr double kMaxLaneTimedBatchMs = 50.0;

using Clock = std::chrono::steady_clock;

// A runtime of the route on a pool of `threads`, raced against `chosen` on its own.
struct RuntimeLane {
  int threads = 1;
  std::int64_t min_rows = 0;                      // the fewest rows padded to the batch on it
  std::shared_ptr<const InferenceModel> runtime;  // null: it could not be built (never tried again)
  std::string name;                               // what the logs call it
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
    main_lane_.name = plan_.runtime_name;
    main_lane_.race = race_for(main_lane_, plan_.chosen_ms, plan_.xnnpack_ms);
  }
  ~SizedBatchRoute() override {
    closing_ = true;                           // a build under way gives up at its next step
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
    BatchRouteModels::FewerThreadsRuntime built;
    const Clock::time_point start = Clock::now();
    try {
      const device::CallerOpenMpThreads on_threads(threads);  // its check runs the model on them
      built = models_.xnnpack_for_fewer_threads(threads, closing_);
    } catch (const std::exception& error) {
      built = {nullptr, "", error_cause(error.what())};
    }
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    lane->runtime = std::move(built.runtime);
    lane->name = built.name.empty() ? plan_.runtime_name : built.name;
    if (closing_) return;  // the route is going away: no timing, no log line after the server's last
    if (lane->runtime) {
      const std::string timed = time_lane(*lane);
      spdlog::info("{}batch {}: {} for {} thread(s) built in {:.0f} ms (calls on fewer than {}{}){}",
                   log_prefix(), plan_.batch_shape[0], lane->name, threads, ms, plan_.threads,
                   built.note.empty() ? "" : "; " + built.note, timed);
    } else {
      spdlog::info("{}batch {}: no {} for {} thread(s) ({}): those calls run the chosen engine", log_prefix(),
                   plan_.batch_shape[0], lane->name, threads, built.note);
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
    lane.race = race_for(lane, plan_.chosen_ms * scale, plan_.xnnpack_ms * scale);
    if (!lane.race) return "";
    if (plan_.chosen_ms * scale > kMaxLaneTimedBatchMs) return "; seeded with the plan's timings";
    torch::NoGradGuard no_grad;
    const std::vector<double> fastest = fastest_alternating_ms(
        {forward_on(models_.chosen, lane.threads), forward_on(lane.runtime, lane.threads)},
        torch::rand(plan_.batch_shape));  // [batch, ...sample] in [0, 1)
    lane.race = race_for(lane, fastest[0], fastest[1]);
    lane.min_rows = padded_min_rows(plan_.batch_shape[0], fastest[0], fastest[1]);
    const std::string timed = "; timed " + format_number("%.3f", fastest[1]) + " ms vs " +
                              format_number("%.3f", fastest[0]) + " ms";
    if (fastest[1] >
        0.9 * fastest[0])  // the race starts on the chosen engine and probes the runtime now and then
      return timed + " on the chosen engine, which runs those calls while it stays faster (raced)";
    return timed + " (chosen engine): batches of " + std::to_string(lane.min_rows) + "-" +
           std::to_string(plan_.batch_shape[0]) + " rows on it, raced against the chosen engine";
  }

  // The race of a lane from these ms per full batch on its threads; null where the plan has no timings
  // (--fp32-engine xnnpack: XNNPACK whenever the input fits).
  std::unique_ptr<EngineRace> race_for(const RuntimeLane& lane, double chosen_ms, double xnnpack_ms) const {
    if (!(plan_.chosen_ms > 0.0 && plan_.xnnpack_ms > 0.0)) return nullptr;
    std::string label = "batch " + std::to_string(plan_.batch_shape[0]);
    if (lane.threads != plan_.threads) label += " on " + std::to_string(lane.threads) + " thread(s)";
    return std::make_unique<EngineRace>(chosen_ms, xnnpack_ms, std::move(label), lane.name);
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
  std::atomic<bool> closing_{false};  // set by the destructor: builder_ stops at its next step
};

}  // namespace

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

}  // namespace ipj::infer
