// Cost of ipj's energy monitoring: a window edge (begin + end) with the CPU estimate and with a RAPL meter on
// a powercap-shaped tree, and the CPU share of the background sampler at 100 ms and 10 ms (Google Benchmark).
// Run through bench/energy_overhead.sh, which adds the training run with and without the monitor.
#include <benchmark/benchmark.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "ipj/energy/energy_monitor.hpp"

namespace {

std::string make_fake_powercap() {
  const std::string root =
      std::filesystem::temp_directory_path() / ("ipj-bench-powercap-" + std::to_string(::getpid()));
  for (const auto& [zone, name] :
       {std::pair{"intel-rapl:0", "package-0"}, std::pair{"intel-rapl:0:0", "dram"}}) {
    std::filesystem::create_directories(root + "/" + zone);
    std::ofstream(root + "/" + zone + "/name") << name << "\n";
    std::ofstream(root + "/" + zone + "/energy_uj") << "123456789\n";
    std::ofstream(root + "/" + zone + "/max_energy_range_uj") << "262143328850\n";
  }
  return root;
}

ipj::energy::MeterSet meters(bool rapl, const std::string& root) {
  ipj::energy::MeterOptions options;
  options.powercap_root = rapl ? root : "/nonexistent";
  options.nvml_library = "/nonexistent";
  return ipj::energy::discover_meters(options);
}

void window_edges(benchmark::State& state) {
  static const std::string root = make_fake_powercap();
  ipj::energy::EnergyMonitor monitor(meters(state.range(0) == 1, root), {100, nullptr});
  for (auto _ : state) {
    monitor.begin_window("w");
    benchmark::DoNotOptimize(monitor.end_window("w"));
  }
  state.SetLabel(state.range(0) == 1 ? "rapl (sysfs files)" : "cpu estimate");
}
BENCHMARK(window_edges)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

// CPU seconds the sampler thread burns per wall second (the main thread only sleeps).
void sampler_cpu_share(benchmark::State& state) {
  static const std::string root = make_fake_powercap();
  for (auto _ : state) {
    timespec before{}, after{};
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &before);
    {
      ipj::energy::EnergyMonitor monitor(meters(true, root), {static_cast<int>(state.range(0)), nullptr});
      std::this_thread::sleep_for(std::chrono::seconds(2));
    }
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &after);
    const double cpu_s = (after.tv_sec - before.tv_sec) + (after.tv_nsec - before.tv_nsec) / 1e9;
    state.counters["cpu_share_pct"] = 100.0 * cpu_s / 2.0;
  }
  state.SetLabel("interval " + std::to_string(state.range(0)) + " ms, rapl meter");
}
BENCHMARK(sampler_cpu_share)->Arg(100)->Arg(10)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
