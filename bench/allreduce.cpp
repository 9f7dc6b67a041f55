// All-reduce cost on c10d's Gloo backend between the ranks `ipj launch` starts: for message sizes from 4 B to
// 64 MB, the median time of an fp32 sum all-reduce and the bus bandwidth (2 (n-1)/n x bytes / time, NCCL's
// convention). Rank 0 prints one JSON line per size. Run by bench/distributed.sh.
// Usage: ipj launch --nproc-per-node 2 -- ipj_bench_allreduce [max_bytes=67108864] [iterations=20]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <string>
#include <vector>

#include "ipj/core/error.hpp"
#include "ipj/dist/process_group.hpp"

int main(int argc, char** argv) {
  const std::int64_t max_bytes = argc > 1 ? std::stoll(argv[1]) : (64 << 20);
  const int iterations = argc > 2 ? std::stoi(argv[2]) : 20;
  try {
    ipj::dist::ProcessGroupContext context(ipj::dist::read_distributed_environment(),
                                           ipj::dist::Backend::gloo, std::chrono::seconds(120));
    const int world = context.world_size();
    for (std::int64_t bytes = 4; bytes <= max_bytes; bytes *= 4) {
      std::vector<torch::Tensor> message{torch::ones({bytes / 4})};  // [bytes / 4] fp32
      context.all_reduce_sum(message);                               // warm-up (connection buffers)
      std::vector<double> seconds;
      for (int iteration = 0; iteration < iterations; ++iteration) {
        context.barrier();
        const auto start = std::chrono::steady_clock::now();
        context.all_reduce_sum(message);
        seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
      std::sort(seconds.begin(), seconds.end());
      const double median = seconds[seconds.size() / 2];
      const double bus_gb_s = 2.0 * (world - 1) / world * static_cast<double>(bytes) / median / 1e9;
      if (context.rank() == 0)
        std::cout << "{\"bytes\": " << bytes << ", \"ranks\": " << world
                  << ", \"median_us\": " << median * 1e6 << ", \"min_us\": " << seconds.front() * 1e6
                  << ", \"bus_gb_s\": " << bus_gb_s << "}" << std::endl;
    }
    return 0;
  } catch (const ipj::Error& error) {
    std::cerr << "ipj_bench_allreduce: " << error.what() << std::endl;
    return ipj::exit_code_for(error.category());
  }
}
