// XNNPACK's runtime at batch 1 on one thread vs on a two-thread pthreadpool whose worker sleeps or spins
// after each call: p50 latency and process CPU per call back to back and with 0.1-5 ms between calls (what
// a lightly loaded server pays for waking or spinning workers). Fresh runtimes each round, sides in turn.
// Usage: ipj_bench_xnnpack_threads MODEL.pt C,H,W [MEAN STD] [rounds=3] [batch=1]   (TorchScript the graph
// IR takes)
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ipj/infer/xnnpack_runtime.hpp"
#include "ipj/quant/torchscript_import.hpp"

namespace {

double process_cpu_ms() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) * 1e3 + static_cast<double>(now.tv_nsec) / 1e6;
}

double wall_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Side {
  const char* name;
  int threads;
  ipj::infer::XnnpackIdle idle;
};

struct Measured {
  double p50_ms, cpu_per_call_ms;
};

// p50 latency and process CPU per call with `gap_ms` of sleep after each call (0: back to back).
Measured measure(const ipj::infer::InferenceModel& model, const torch::Tensor& input, double gap_ms) {
  const int calls = gap_ms > 0 ? 100 : std::max<int>(100, static_cast<int>(1000 / input.size(0)));
  for (int call = 0; call < calls / 10; ++call)
    model.forward(input);
  std::vector<double> times;
  const double cpu_start = process_cpu_ms();
  for (int call = 0; call < calls; ++call) {
    const double start = wall_ms();
    model.forward(input);
    times.push_back(wall_ms() - start);
    if (gap_ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(gap_ms));
  }
  const double cpu_per_call = (process_cpu_ms() - cpu_start) / calls;
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return {times[times.size() / 2], cpu_per_call};
}

std::vector<std::int64_t> parse_shape(const std::string& text) {
  std::vector<std::int64_t> shape;
  std::stringstream stream(text);
  for (std::string item; std::getline(stream, item, ',');)
    shape.push_back(std::stoll(item));
  return shape;
}

// Sleep after each call: back to back, then a server's gaps between requests.
constexpr double kGapsMs[] = {0.0, 0.1, 0.5, 1.0, 2.0, 5.0};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL.pt C,H,W [MEAN STD] [rounds=3] [batch=1]\n", argv[0]);
    return 2;
  }
  ipj::quant::ImportOptions options;
  options.input_shape = parse_shape(argv[2]);
  if (argc > 4) {
    options.mean = {std::stof(argv[3])};
    options.std = {std::stof(argv[4])};
  }
  const int rounds = argc > 5 ? std::stoi(argv[5]) : 3;
  const std::int64_t batch = argc > 6 ? std::stoll(argv[6]) : 1;
  const ipj::quant::Graph graph = ipj::quant::import_torchscript_file(argv[1], options);
  std::vector<std::int64_t> shape{batch};
  shape.insert(shape.end(), options.input_shape.begin(), options.input_shape.end());
  torch::NoGradGuard no_grad;
  const torch::Tensor input = torch::rand(shape);  // [batch, C, H, W] pixels in [0, 1)
  const std::vector<Side> sides{{"one thread", 1, ipj::infer::XnnpackIdle::sleep},
                                {"pool of 2, worker sleeps", 2, ipj::infer::XnnpackIdle::sleep},
                                {"pool of 2, worker spins", 2, ipj::infer::XnnpackIdle::spin}};
  std::printf("%-5s %-26s %7s %9s %13s %10s %10s\n", "round", "side", "gap_ms", "p50_ms", "cpu_ms/call",
              "p50_ratio", "cpu_ratio");
  for (int round = 1; round <= rounds; ++round) {
    std::vector<Measured> one_thread;  // per gap
    for (const Side& side : sides) {
      const auto model = ipj::infer::xnnpack_runtime_model(graph, batch, side.threads, nullptr, side.idle);
      for (std::size_t gap = 0; gap < std::size(kGapsMs); ++gap) {
        const Measured measured = measure(*model, input, kGapsMs[gap]);
        if (side.threads == 1) one_thread.push_back(measured);
        std::printf("%-5d %-26s %7.1f %9.3f %13.3f %9.2fx %9.2fx\n", round, side.name, kGapsMs[gap],
                    measured.p50_ms, measured.cpu_per_call_ms, one_thread[gap].p50_ms / measured.p50_ms,
                    measured.cpu_per_call_ms / one_thread[gap].cpu_per_call_ms);
      }
    }
  }
  return 0;
}
