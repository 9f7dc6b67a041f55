// Where the time of one int8 graph file goes: runs QuantizedGraph::forward at one batch size under LibTorch's
// legacy profiler and writes a chrome trace (one event per ATen / quantized operator call), next to the same
// batch through a TorchScript file for comparison. Random inputs in [0, 1]: for timing only, not accuracy.
// Usage: ipj_bench_int8_profile INT8_FILE [TORCHSCRIPT_FILE] [batch=64] [threads=2] [out_prefix=/tmp/int8]
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "ipj/quant/quantized_graph.hpp"

namespace {

template <typename Forward>
double median_ms(Forward&& forward, int calls) {
  std::vector<double> times;
  for (int call = 0; call < calls; ++call) {
    const auto start = std::chrono::steady_clock::now();
    forward();
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s INT8_FILE [TORCHSCRIPT_FILE|-] [batch] [threads] [out_prefix]\n",
                 argv[0]);
    return 2;
  }
  const std::string script_path = argc > 2 ? argv[2] : "-";
  const std::int64_t batch = argc > 3 ? std::stoll(argv[3]) : 64;
  at::set_num_threads(argc > 4 ? std::stoi(argv[4]) : 2);
  const std::string prefix = argc > 5 ? argv[5] : "/tmp/int8";
  torch::NoGradGuard no_grad;
  const auto graph = ipj::quant::QuantizedGraph::load(argv[1]);
  const torch::Tensor input = torch::rand({batch, 1, 28, 28});  // x: [B, 1, 28, 28] pixels
  auto run_int8 = [&] { return graph.forward(input); };
  for (int warmup = 0; warmup < 3; ++warmup)
    run_int8();
  std::printf("int8 batch %lld: median %.3f ms\n", static_cast<long long>(batch), median_ms(run_int8, 10));
  {
    torch::autograd::profiler::RecordProfile guard(prefix + "-int8.trace");
    for (int call = 0; call < 3; ++call)
      run_int8();
  }
  if (script_path == "-") return 0;
  torch::jit::Module module = torch::jit::load(script_path);
  module.eval();
  auto run_script = [&] { return module.forward({input}).toTensor(); };
  for (int warmup = 0; warmup < 3; ++warmup)
    run_script();
  std::printf("torchscript fp32 batch %lld: median %.3f ms\n", static_cast<long long>(batch),
              median_ms(run_script, 10));
  {
    torch::autograd::profiler::RecordProfile guard(prefix + "-fp32.trace");
    for (int call = 0; call < 3; ++call)
      run_script();
  }
  return 0;
}
