// The fp32 engine choice (eager vs frozen graph, timed alternately) and ipj::linear, the batch-1 linear
// operator the frozen graph uses. Timing is wall-clock on the threads set at load; ties go to eager.
#include "ipj/infer/fp32_engine.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/jit/passes/subgraph_rewrite.h>
#include <torch/library.h>
#include <torch/script.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <optional>
#include <thread>

#include "graph_models.hpp"
#include "ipj/core/error.hpp"
#include "ipj/core/number_format.hpp"
#include "ipj/device/machine_load.hpp"
#include "ipj/device/threading.hpp"
#include "ipj/energy/meter.hpp"

namespace ipj::infer {
namespace {

// x [1, K] (float, CPU), weight [N, K], bias [N] -> [1, N] by addmv; anything else by aten::linear.
at::Tensor batch1_linear(const at::Tensor& x, const at::Tensor& weight,
                         const c10::optional<at::Tensor>& bias) {
  if (x.dim() == 2 && x.size(0) == 1 && x.device().is_cpu() && x.scalar_type() == at::kFloat &&
      weight.dim() == 2 && weight.scalar_type() == at::kFloat && !weight.is_mkldnn()) {
    const at::Tensor row = x.select(0, 0);  // [K]
    const at::Tensor out = bias && bias->defined() ? at::addmv(*bias, weight, row) : at::mv(weight, row);
    return out.unsqueeze(0);  // [1, N]
  }
  return at::linear(x, weight, bias);
}

TORCH_LIBRARY(ipj, library) {
  library.def("linear(Tensor x, Tensor weight, Tensor? bias) -> Tensor", &batch1_linear);
}

using Clock = std::chrono::steady_clock;

double milliseconds_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle] : 0.5 * (values[middle - 1] + values[middle]);
}

torch::Tensor random_batch(std::int64_t batch, const std::vector<std::int64_t>& sample_shape) {
  return torch::rand(batch_shape(batch, sample_shape));  // [batch, ...sample] in [0, 1), like pixels
}

// Whether the live candidates' medians so far are >= 1.5x apart (more rounds would not change the order).
bool clearly_apart(const std::vector<std::vector<double>>& times, const std::vector<bool>& live) {
  double fastest = INFINITY, slowest = 0.0;
  for (std::size_t index = 0; index < times.size(); ++index) {
    if (!live[index]) continue;
    const double value = median(times[index]);
    fastest = std::min(fastest, value);
    slowest = std::max(slowest, value);
  }
  return slowest >= 1.5 * fastest;
}

// Median ms per forward of each live forward on `input`, alternating them each round (a neighbour's burst
// hits every one alike); stops after 9 timed rounds, or from the third on once ~1 s is spent or the medians
// are 1.5x apart. The caller has already run each live forward once on `input`'s shape (oneDNN builds its
// kernels for a shape on its first call).
std::vector<double> alternate_timings(const std::vector<Forward>& forwards, const std::vector<bool>& live,
                                      const torch::Tensor& input) {
  std::vector<std::vector<double>> times(forwards.size());
  const Clock::time_point start = Clock::now();
  for (int round = 0; round < 9; ++round) {
    for (std::size_t index = 0; index < forwards.size(); ++index) {
      if (!live[index]) continue;
      const Clock::time_point begin = Clock::now();
      forwards[index](input);
      times[index].push_back(milliseconds_since(begin));
    }
    if (round >= 2 && (milliseconds_since(start) > 1000.0 || clearly_apart(times, live))) break;
  }
  std::vector<double> medians(forwards.size(), 0.0);
  for (std::size_t index = 0; index < forwards.size(); ++index)
    if (live[index]) medians[index] = median(times[index]);
  return medians;
}

// max |candidate - reference| / max(1, max finite |reference|), where places that are equal or NaN on both
// sides count as 0 (a model that outputs NaN or inf is still compared); a NaN on one side only, or other
// shapes, is INFINITY; empty outputs of the same shape are 0.
double relative_difference(const torch::Tensor& candidate, const torch::Tensor& reference) {
  if (!candidate.sizes().equals(reference.sizes())) return INFINITY;
  if (reference.numel() == 0) return 0.0;
  const torch::Tensor ours = candidate.to(torch::kFloat), theirs = reference.to(torch::kFloat);
  const torch::Tensor same = ours.eq(theirs).logical_or(ours.isnan().logical_and(theirs.isnan()));
  const torch::Tensor gap = torch::where(same, torch::zeros_like(ours), (ours - theirs).abs());
  const double largest_gap = torch::nan_to_num(gap, INFINITY).max().item<double>();
  const torch::Tensor finite = theirs.masked_select(theirs.isfinite());
  const double scale = std::max(1.0, finite.numel() > 0 ? finite.abs().max().item<double>() : 0.0);
  return largest_gap / scale;
}

std::string describe(const EngineMeasurement& measured, std::int64_t batch) {
  const std::string batch1 =
      choice_name(measured.engine) + " " + format_number("%.3f", measured.batch1_ms) + " ms at batch 1";
  if (batch == 1) return batch1;  // timed at batch 1 only (a server with max_batch_size 1, `--batch 1`)
  return batch1 + ", " + format_number("%.3f", measured.batch_ms) + " ms at batch " + std::to_string(batch);
}

}  // namespace

Json to_json(const Fp32EngineChoice& choice) {
  Json measured = Json::array();
  for (const EngineMeasurement& entry : choice.measured)
    measured.push_back({{"engine", choice_name(entry.engine)},
                        {"batch1_ms", entry.batch1_ms},
                        {"batch_ms", entry.batch_ms},
                        {"max_difference", entry.max_difference},
                        {"exact", entry.exact}});
  return {{"requested", choice_name(choice.requested)},
          {"engine", choice_name(choice.engine)},
          {"batch", choice.batch},
          {"measured", measured},
          {"reason", choice.reason},
          {"batch1_threads", choice.batch1_threads},
          {"batch1_one_thread_ms", choice.batch1_one_thread_ms},
          {"batch1_engine", choice_name(choice.batch1_engine)},
          {"batch1_xnnpack_ms", choice.batch1_xnnpack_ms},
          {"batch1_xnnpack_form", choice_name(choice.batch1_xnnpack_form)},
          {"batch1_onednn_ms", choice.batch1_onednn_ms},
          {"batch1_pool_ms", choice.batch1_pool_ms},
          {"batch1_pool_cpu_ratio", choice.batch1_pool_cpu_ratio},
          {"batch1_pool_threads", choice.batch1_pool_threads},
          {"prefer", choice_name(choice.prefer)},
          {"batch_engine", choice_name(choice.batch_engine)},
          {"batch_xnnpack_ms", choice.batch_xnnpack_ms},
          {"batch_onednn_ms", choice.batch_onednn_ms},
          {"batch_xnnpack_threads", choice.batch_xnnpack_threads},
          {"batch_xnnpack_min_rows", choice.batch_xnnpack_min_rows},
          {"batch_xnnpack_row_parts", choice.batch_xnnpack_row_parts}};
}

Fp32EngineChoice choose_fp32_engine(const std::vector<Fp32Candidate>& candidates,
                                    const std::vector<std::int64_t>& sample_shape, std::int64_t batch) {
  Fp32EngineChoice choice;
  choice.batch = std::max<std::int64_t>(batch, 1);
  torch::NoGradGuard no_grad;
  const torch::Tensor large = random_batch(choice.batch, sample_shape),
                      single = large.narrow(0, 0, 1).clone();
  // The reference runs and the exactness checks are also every candidate's warm-up at both shapes. Each
  // checked call gets its own copy of the input: a model may change its input in place (x.add_(1)).
  const torch::Tensor reference = candidates.at(0).forward(large.clone());  // eager
  candidates.at(0).forward(single);
  std::vector<bool> live(candidates.size(), true);
  std::vector<double> differences(candidates.size(), 0.0);
  std::vector<Forward> forwards;
  for (const Fp32Candidate& candidate : candidates)
    forwards.push_back(candidate.forward);
  std::string dropped;
  for (std::size_t index = 1; index < candidates.size(); ++index) {
    try {
      differences[index] = relative_difference(candidates[index].forward(large.clone()), reference);
      differences[index] = std::max(
          differences[index],
          fp32_wide_difference(candidates[0].forward, candidates[index].forward, sample_shape, choice.batch));
      candidates[index].forward(single);
    } catch (const std::exception& error) {
      live[index] = false;
      dropped += "; " + choice_name(candidates[index].engine) + " fails: " + error_cause(error.what());
    }
  }
  const std::vector<double> batch1 = alternate_timings(forwards, live, single);
  const std::vector<double> batched = choice.batch == 1 ? batch1 : alternate_timings(forwards, live, large);
  std::optional<std::size_t> best;
  double best_score = INFINITY;
  for (std::size_t index = 0; index < candidates.size(); ++index) {
    if (!live[index]) continue;
    EngineMeasurement entry{candidates[index].engine, batch1[index], batched[index], differences[index],
                            differences[index] <= kFp32EngineTolerance};
    choice.measured.push_back(entry);
    const double score = std::sqrt(entry.batch1_ms * entry.batch_ms);
    if (entry.exact && score < best_score) best = index, best_score = score;
    if (!entry.exact)
      dropped += "; " + choice_name(entry.engine) + " differs from eager by " +
                 format_number("%.2g", entry.max_difference) + " (relative)";
  }
  choice.engine = candidates[best.value_or(0)].engine;
  std::string timings;
  for (const EngineMeasurement& entry : choice.measured)
    timings += (timings.empty() ? "" : " vs ") + describe(entry, choice.batch);
  choice.reason = "fastest exact engine measured: " + timings + dropped;
  return choice;
}

double fp32_difference(const std::function<torch::Tensor(const torch::Tensor&)>& reference,
                       const std::function<torch::Tensor(const torch::Tensor&)>& candidate,
                       const std::vector<std::int64_t>& sample_shape, std::int64_t batch) {
  torch::NoGradGuard no_grad;
  const torch::Tensor input = random_batch(std::max<std::int64_t>(batch, 1), sample_shape);
  return relative_difference(candidate(input.clone()), reference(input.clone()));
}

std::vector<double> fastest_alternating_ms(const std::vector<Forward>& forwards, const torch::Tensor& input) {
  for (const Forward& warm_up : forwards)
    warm_up(input);
  std::vector<double> fastest(forwards.size(), INFINITY);
  const Clock::time_point start = Clock::now();
  for (int round = 0; round < 9 && (round < 3 || milliseconds_since(start) < 500.0); ++round)
    for (std::size_t index = 0; index < forwards.size(); ++index) {
      forwards[index](input);  // untimed: the other side's weights may have pushed this one's out of cache
      const Clock::time_point begin = Clock::now();
      forwards[index](input);
      fastest[index] = std::min(fastest[index], milliseconds_since(begin));
    }
  return fastest;
}

std::vector<double> cpu_ms_per_call(const std::vector<Forward>& forwards, const torch::Tensor& input,
                                    double fastest_ms) {
  const int calls = static_cast<int>(std::clamp(20.0 / std::max(fastest_ms, 1e-3), 10.0, 200.0));
  std::vector<double> cpu_ms(forwards.size(), INFINITY);
  for (int round = 0; round < 5; ++round)
    for (std::size_t side = 0; side < forwards.size(); ++side) {
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(kPoolSpinSettleMs));
      forwards[side](input);
      const double start_s = energy::process_cpu_seconds();
      for (int call = 0; call < calls; ++call)
        forwards[side](input);
      cpu_ms[side] = std::min(cpu_ms[side], (energy::process_cpu_seconds() - start_s) * 1e3 / calls);
    }
  return cpu_ms;
}

double fp32_wide_difference(const std::function<torch::Tensor(const torch::Tensor&)>& reference,
                            const std::function<torch::Tensor(const torch::Tensor&)>& candidate,
                            const std::vector<std::int64_t>& sample_shape, std::int64_t batch) {
  torch::NoGradGuard no_grad;
  double difference = 0.0;
  for (const double scale : {2.0, 100.0}) {
    const torch::Tensor input =
        torch::randn(batch_shape(std::max<std::int64_t>(batch, 1), sample_shape)) * scale;  // [batch, ...]
    difference =
        std::max(difference, relative_difference(candidate(input.clone()), reference(input.clone())));
  }
  return difference;
}

std::string Batch1Threads::describe() const {
  if (xnnpack)
    return "batch 1 on XNNPACK's int8 runtime: " + format_number("%.3f", xnnpack_ms) + " ms vs " +
           format_number("%.3f", threads == 1 ? one_thread_ms : pool_ms) +
           " ms on LibTorch's int8 kernels (" + std::to_string(threads == 1 ? 1 : pool) + " thread(s))";
  if (threads != 1) return "";
  return "batch 1 on one thread: " + format_number("%.3f", one_thread_ms) + " ms vs " +
         format_number("%.3f", pool_ms) + " ms on " + std::to_string(pool);
}

Json to_json(const Batch1Threads& measured) {
  return {{"threads", measured.threads},
          {"pool", measured.pool},
          {"one_thread_ms", measured.one_thread_ms},
          {"pool_ms", measured.pool_ms},
          {"xnnpack_ms", measured.xnnpack_ms},
          {"engine", measured.xnnpack  ? "xnnpack"
                     : measured.onednn ? "onednn"
                                       : "libtorch"}};
}

Json to_json(const Int8BatchEngine& engine) {
  return {{"batch", engine.batch},
          {"threads", engine.threads},
          {"engine", engine.xnnpack ? "xnnpack" : "libtorch"},
          {"libtorch_ms", engine.libtorch_ms},
          {"xnnpack_ms", engine.xnnpack_ms},
          {"min_rows", engine.min_rows},
          {"row_parts", engine.row_parts},
          {"reason", engine.reason}};
}

Batch1Threads measure_batch1_threads(const std::function<torch::Tensor(const torch::Tensor&)>& forward,
                                     const std::vector<std::int64_t>& sample_shape, int pool_threads) {
  Batch1Threads measured;
  // the pool as a run sets it later (thread plans are applied after loading): --threads, else every CPU the
  // process may use
  const int pool = pool_threads > 0 ? pool_threads : device::read_cpu_limits().available_cpus;
  if (pool <= 1) return measured;
  torch::NoGradGuard no_grad;
  const torch::Tensor single = random_batch(1, sample_shape);
  const auto on_threads = [&forward](int threads) {
    return [&forward, threads](const torch::Tensor& input) {
      const device::CallerOpenMpThreads scope(threads);
      return forward(input);
    };
  };
  const std::vector<double> fastest = fastest_alternating_ms({on_threads(pool), on_threads(1)}, single);
  measured.pool = pool;
  measured.pool_ms = fastest[0];
  measured.one_thread_ms = fastest[1];
  // One thread unless the pool is >= 10% faster: within that, the pool's extra cores (working or spinning)
  // cost more joules than the latency they buy.
  measured.threads = fastest[0] <= 0.9 * fastest[1] ? 0 : 1;
  return measured;
}

int use_batch1_linear(torch::jit::Module& module) {
  std::shared_ptr<torch::jit::Graph> graph = module.get_method("forward").graph();
  torch::jit::SubgraphRewriter rewriter;
  rewriter.RegisterRewritePattern(R"(
graph(%x, %weight, %bias):
  %y = aten::linear(%x, %weight, %bias)
  return (%y))",
                                  R"(
graph(%x, %weight, %bias):
  %y = ipj::linear(%x, %weight, %bias)
  return (%y))");
  rewriter.runOnGraph(graph);
  int rewritten = 0;
  for (const torch::jit::Node* node : graph->nodes())
    if (node->kind().toQualString() == std::string("ipj::linear")) ++rewritten;
  return rewritten;
}

}  // namespace ipj::infer
