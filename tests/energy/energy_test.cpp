// Energy arithmetic on synthetic counters: a fake powercap tree (wrap, multi-package, dram, psys nesting,
// MMIO duplicates), a fake NVML library (counter, power integration, failures, CUDA_VISIBLE_DEVICES), the
// labelled estimate, and window nesting/overlap in the monitor.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "ipj/core/error.hpp"
#include "ipj/energy/energy_monitor.hpp"
#include "ipj/energy/energy_report.hpp"
#include "ipj/energy/meter.hpp"
#include "support/test_support.hpp"

namespace ipj::energy {
namespace {

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text << "\n";
}

// Creates ROOT/ZONE with name, energy_uj and max_energy_range_uj.
void make_zone(const std::string& root, const std::string& zone, const std::string& name, double energy_uj,
               double max_range_uj) {
  std::filesystem::create_directories(root + "/" + zone);
  write_text(root + "/" + zone + "/name", name);
  write_text(root + "/" + zone + "/energy_uj", std::to_string(static_cast<long long>(energy_uj)));
  write_text(root + "/" + zone + "/max_energy_range_uj",
             std::to_string(static_cast<long long>(max_range_uj)));
}

void set_counter(const std::string& root, const std::string& zone, double energy_uj) {
  write_text(root + "/" + zone + "/energy_uj", std::to_string(static_cast<long long>(energy_uj)));
}

std::unique_ptr<Meter> open_rapl(const std::string& root) {
  std::string reason;
  auto meter = open_rapl_meter(root, reason);
  EXPECT_TRUE(meter) << reason;
  return meter;
}

// A meter whose cumulative joules the test sets by hand.
class ManualMeter : public Meter {
 public:
  explicit ManualMeter(double* joules) : joules_(joules) {
    channels_.push_back(Channel{"manual", "cpu", EnergySource::counter, true, ""});
  }
  std::string name() const override { return "manual"; }
  const std::vector<Channel>& channels() const override { return channels_; }
  std::vector<double> sample(double) override { return {*joules_}; }

 private:
  double* joules_;
  std::vector<Channel> channels_;
};

// Strings only at the edges: every reported source spells and parses back to itself, "none" included,
// and an unknown spelling (a damaged or foreign results file) is refused with the place and the choices.
TEST(ReportedSource, SpellsAndParsesEverySourceAndRefusesUnknownText) {
  for (const ReportedSource source :
       {ReportedSource(EnergySource::counter), ReportedSource(EnergySource::integrated),
        ReportedSource(EnergySource::estimated), ReportedSource()})
    EXPECT_EQ(parse_reported_source(reported_source_name(source), "results.json"), source);
  EXPECT_EQ(reported_source_name(std::nullopt), "none");
  EXPECT_EQ(reported_source_name(EnergySource::integrated), "integrated");
  try {
    parse_reported_source("rapl", "results.json: final.energy_source");
    FAIL() << "an unknown spelling was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.category(), ErrorCategory::invalid_input);
    const std::string message = error.what();
    EXPECT_NE(message.find("results.json: final.energy_source"), std::string::npos) << message;
    EXPECT_NE(message.find("'rapl'"), std::string::npos) << message;
    EXPECT_NE(message.find("counter, integrated, estimated, none"), std::string::npos) << message;
  }
  EXPECT_THROW(parse_reported_source("", "x"), Error);
  EXPECT_THROW(parse_reported_source("Counter", "x"), Error);
  EXPECT_EQ(weakest(ReportedSource(), ReportedSource()), std::nullopt);
  EXPECT_EQ(weakest(ReportedSource(EnergySource::counter), ReportedSource()), EnergySource::counter);
  EXPECT_EQ(weakest(ReportedSource(EnergySource::counter), ReportedSource(EnergySource::estimated)),
            EnergySource::estimated);
}

}  // namespace

TEST(Rapl, PackageAndDramCountersAdvanceAndWrap) {
  testing::TempDir dir;
  make_zone(dir.path(), "intel-rapl:0", "package-0", 900'000, 1'000'000);
  make_zone(dir.path(), "intel-rapl:0:0", "core", 500, 1'000'000);
  make_zone(dir.path(), "intel-rapl:0:1", "dram", 10, 1'000'000);
  make_zone(dir.path(), "intel-rapl-mmio:0", "package-0", 0, 1'000'000);  // duplicate interface: ignored
  auto meter = open_rapl(dir.path());
  ASSERT_EQ(meter->channels().size(), 3u);
  EXPECT_EQ(meter->channels()[0].name, "package-0");
  EXPECT_TRUE(meter->channels()[0].in_total);
  EXPECT_FALSE(meter->channels()[1].in_total);  // core is inside the package
  EXPECT_EQ(meter->channels()[2].kind, "dram");
  EXPECT_TRUE(meter->channels()[2].in_total);

  set_counter(dir.path(), "intel-rapl:0", 950'000);
  set_counter(dir.path(), "intel-rapl:0:1", 2'010);
  auto joules = meter->sample(1.0);
  EXPECT_DOUBLE_EQ(joules[0], 0.05);
  EXPECT_DOUBLE_EQ(joules[2], 0.002);
  set_counter(dir.path(), "intel-rapl:0", 100'000);  // wrapped: 950000 -> 1000000 -> 100000
  joules = meter->sample(2.0);
  EXPECT_DOUBLE_EQ(joules[0], 0.05 + 0.15);
  set_counter(dir.path(), "intel-rapl:0", 400'000);
  joules = meter->sample(3.0);
  EXPECT_DOUBLE_EQ(joules[0], 0.5);
}

TEST(Rapl, TwoPackagesSumAndPsysContainsThem) {
  testing::TempDir dir;
  make_zone(dir.path(), "intel-rapl:0", "package-0", 0, 1e9);
  make_zone(dir.path(), "intel-rapl:1", "package-1", 0, 1e9);
  {
    EnergyMonitor monitor(MeterSet{}, {});
    EXPECT_EQ(monitor.channels().size(), 0u);
  }
  MeterSet set;
  set.meters.push_back(open_rapl(dir.path()));
  EnergyMonitor monitor(std::move(set), MonitorOptions{1000, nullptr});
  monitor.begin_window("both");
  set_counter(dir.path(), "intel-rapl:0", 3e6);
  set_counter(dir.path(), "intel-rapl:1", 4e6);
  const Measurement measurement = monitor.end_window("both");
  EXPECT_DOUBLE_EQ(measurement.energy_j, 7.0);
  EXPECT_EQ(measurement.source, EnergySource::counter);
  // latest() reads no meter: it reports up to the last sample taken (here the window's end), not the new
  // counter
  set_counter(dir.path(), "intel-rapl:0", 10e6);
  EXPECT_DOUBLE_EQ(monitor.latest().energy_j, 7.0);
  EXPECT_DOUBLE_EQ(monitor.total().energy_j, 14.0);
  EXPECT_DOUBLE_EQ(monitor.latest().energy_j, 14.0);

  testing::TempDir platform;
  make_zone(platform.path(), "intel-rapl:0", "package-0", 0, 1e9);
  make_zone(platform.path(), "intel-rapl:1", "psys", 0, 1e9);
  make_zone(platform.path(), "intel-rapl:0:0", "dram", 0, 1e9);
  MeterSet nested;
  nested.meters.push_back(open_rapl(platform.path()));
  EnergyMonitor nested_monitor(std::move(nested), MonitorOptions{1000, nullptr});
  nested_monitor.begin_window("w");
  set_counter(platform.path(), "intel-rapl:0", 5e6);
  set_counter(platform.path(), "intel-rapl:0:0", 1e6);
  set_counter(platform.path(), "intel-rapl:1", 9e6);
  const Measurement platform_energy = nested_monitor.end_window("w");
  EXPECT_DOUBLE_EQ(platform_energy.energy_j, 9.0);  // psys only: package and dram are inside it
  ASSERT_EQ(platform_energy.devices.size(), 3u);
  EXPECT_DOUBLE_EQ(platform_energy.devices[0].energy_j, 5.0);
  EXPECT_FALSE(platform_energy.devices[0].in_total);
}

TEST(Rapl, MissingTreeGivesAReason) {
  std::string reason;
  EXPECT_FALSE(open_rapl_meter("/nonexistent/powercap", reason));
  EXPECT_NE(reason.find("/nonexistent/powercap"), std::string::npos);
}

TEST(Estimate, NoSensorMeansALabelledEstimateWithExactArithmetic) {
  MeterOptions options;
  options.powercap_root = "/nonexistent/powercap";
  options.nvml_library = "/nonexistent/libnvidia-ml.so.1";
  double cpu_seconds = 0.0;
  options.cpu_seconds = [&] { return cpu_seconds; };
  options.cpu_tdp_w = 20.0;
  options.idle_fraction = 0.1;
  MeterSet set = discover_meters(options);
  ASSERT_EQ(set.meters.size(), 1u);
  EXPECT_EQ(set.status.size(), 3u);
  EXPECT_FALSE(set.status[0].available);  // rapl
  EXPECT_FALSE(set.status[1].available);  // nvml
  Meter& meter = *set.meters[0];
  EXPECT_EQ(meter.channels()[0].source, EnergySource::estimated);
  EXPECT_NE(meter.channels()[0].model.find("TDP 20.0 W"), std::string::npos) << meter.channels()[0].model;
  meter.sample(100.0);
  cpu_seconds = 3.0;
  const int cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  EXPECT_NEAR(meter.sample(110.0)[0], 3.0 * 20.0 / cpus + 10.0 * 0.1 * 20.0, 1e-12);
}

TEST(RankMeters, NodeCountersOncePerMachineAndTheEstimatePerProcess) {
  testing::TempDir dir;
  make_zone(dir.path(), "intel-rapl:0", "package-0", 0, 1'000'000);
  MeterOptions options;
  options.powercap_root = dir.path();
  options.nvml_library = "/nonexistent/libnvidia-ml.so.1";
  const MeterSet first = discover_meters_for_rank(options, 0, 2);
  ASSERT_EQ(first.meters.size(), 1u);
  EXPECT_EQ(first.meters[0]->name(), "rapl");
  const MeterSet second = discover_meters_for_rank(options, 1, 2);
  EXPECT_TRUE(second.meters.empty());  // the machine's package counter is local rank 0's
  EXPECT_FALSE(second.status[0].available);
  EXPECT_NE(second.status[0].reason.find("local rank 0"), std::string::npos);

  // No sensor: every rank estimates its own CPU time and half of the machine's idle share.
  options.powercap_root = "/nonexistent/powercap";
  double cpu_seconds = 0.0;
  options.cpu_seconds = [&] { return cpu_seconds; };
  options.cpu_tdp_w = 20.0;
  options.idle_fraction = 0.1;
  MeterSet estimate = discover_meters_for_rank(options, 1, 2);
  ASSERT_EQ(estimate.meters.size(), 1u);
  estimate.meters[0]->sample(100.0);
  cpu_seconds = 3.0;
  const int cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  EXPECT_NEAR(estimate.meters[0]->sample(110.0)[0], 3.0 * 20.0 / cpus + 10.0 * 0.05 * 20.0, 1e-12);
}

TEST(Nvml, CounterIntegrationFailuresAndVisibleDevices) {
  testing::TempDir dir;
  const std::string state = dir.file("nvml.state");
  ::setenv("FAKE_NVML_STATE", state.c_str(), 1);
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  std::string reason;

  write_text(state, "count 1\nenergy_mj 0 1000\nname 0 NVIDIA H200");
  auto counter = open_nvml_meter(IPJ_FAKE_NVML, reason);
  ASSERT_TRUE(counter) << reason;
  EXPECT_EQ(counter->channels()[0].name, "gpu0 (NVIDIA H200)");
  EXPECT_EQ(counter->channels()[0].source, EnergySource::counter);
  write_text(state, "count 1\nenergy_mj 0 6500");
  EXPECT_DOUBLE_EQ(counter->sample(1.0)[0], 5.5);
  counter.reset();

  write_text(state, "count 1\nno_energy 1\npower_mw 0 50000");
  auto integrated = open_nvml_meter(IPJ_FAKE_NVML, reason);
  ASSERT_TRUE(integrated) << reason;
  EXPECT_EQ(integrated->channels()[0].source, EnergySource::integrated);
  EXPECT_DOUBLE_EQ(integrated->sample(10.0)[0], 0.0);
  write_text(state, "count 1\nno_energy 1\npower_mw 0 100000");
  EXPECT_DOUBLE_EQ(integrated->sample(12.0)[0], 150.0);  // trapezoid: (50 + 100) / 2 W x 2 s
  integrated.reset();

  write_text(state, "count 3\nname 0 A\nname 1 B\nname 2 C");
  ::setenv("CUDA_VISIBLE_DEVICES", "2,0,7,1", 1);  // stops at the first invalid entry, like CUDA
  auto visible = open_nvml_meter(IPJ_FAKE_NVML, reason);
  ASSERT_TRUE(visible) << reason;
  ASSERT_EQ(visible->channels().size(), 2u);
  EXPECT_EQ(visible->channels()[0].name, "gpu0 (C)");
  EXPECT_EQ(visible->channels()[1].name, "gpu1 (A)");
  visible.reset();
  ::setenv("CUDA_VISIBLE_DEVICES", "", 1);
  EXPECT_FALSE(open_nvml_meter(IPJ_FAKE_NVML, reason));
  EXPECT_NE(reason.find("CUDA_VISIBLE_DEVICES"), std::string::npos) << reason;
  ::unsetenv("CUDA_VISIBLE_DEVICES");

  write_text(state, "init_fail 1");
  EXPECT_FALSE(open_nvml_meter(IPJ_FAKE_NVML, reason));
  EXPECT_NE(reason.find("Driver Not Loaded"), std::string::npos) << reason;
  EXPECT_FALSE(open_nvml_meter("/nonexistent/libnvidia-ml.so.1", reason));
  EXPECT_NE(reason.find("cannot load"), std::string::npos) << reason;
}

TEST(Monitor, NestedAndOverlappingWindows) {
  double joules = 0.0;
  MeterSet set;
  set.meters.push_back(std::make_unique<ManualMeter>(&joules));
  EnergyMonitor monitor(std::move(set), MonitorOptions{5, nullptr});
  monitor.begin_window("a");
  joules = 10.0;
  monitor.begin_window("b");
  joules = 25.0;
  monitor.begin_window("inner");
  joules = 26.0;
  EXPECT_DOUBLE_EQ(monitor.end_window("inner").energy_j, 1.0);
  EXPECT_DOUBLE_EQ(monitor.end_window("a").energy_j, 26.0);  // overlaps b
  joules = 40.0;
  const Measurement b = monitor.end_window("b");
  EXPECT_DOUBLE_EQ(b.energy_j, 30.0);
  EXPECT_GT(b.wall_s, 0.0);
  EXPECT_EQ(b.devices.size(), 1u);
  EXPECT_THROW(monitor.end_window("b"), Error);
  monitor.begin_window("c");
  EXPECT_THROW(monitor.begin_window("c"), Error);
  EXPECT_DOUBLE_EQ(monitor.total().energy_j, 40.0);
  const std::string text = monitor.prometheus_text();
  EXPECT_NE(text.find("ipj_energy_joules_total{device=\"manual\",kind=\"cpu\",source=\"counter\""),
            std::string::npos)
      << text;
}

// A child process whose address space has no room for a thread stack: the monitor degrades to reading its
// meters at window edges and says so, instead of failing the measured command (one CI run saw exit 70).
TEST(Monitor, WithoutASamplingThreadWindowsStillMeasureAndSayWhy) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    long pages = 0;
    std::ifstream("/proc/self/statm") >> pages;
    const rlim_t bytes = static_cast<rlim_t>(pages) * static_cast<rlim_t>(::sysconf(_SC_PAGESIZE));
    const rlimit limit{bytes + (2u << 20), bytes + (2u << 20)};  // 2 MiB spare: no 8 MiB thread stack
    if (::setrlimit(RLIMIT_AS, &limit) != 0) ::_exit(2);
    // New threads get 16 MiB stacks, larger than any stack glibc cached from a thread that already exited
    // (a static initialiser's), so the monitor's thread needs a new mapping, which the limit refuses.
    pthread_attr_t attributes;
    ::pthread_attr_init(&attributes);
    ::pthread_attr_setstacksize(&attributes, 16u << 20);
    if (::pthread_setattr_default_np(&attributes) != 0) ::_exit(2);
    double joules = 5.0;
    MeterSet set;
    set.meters.push_back(std::make_unique<ManualMeter>(&joules));
    EnergyMonitor monitor(std::move(set), MonitorOptions{5, nullptr});
    monitor.begin_window("w");
    joules = 12.5;
    const bool exact = monitor.end_window("w").energy_j == 7.5;
    bool said_why = false;
    for (const MeterStatus& status : monitor.meter_status())
      said_why = said_why || (status.name == "sampler" && !status.available &&
                              status.reason.find("sampling thread") != std::string::npos);
    ::_exit(exact && said_why ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: wrong energy or no 'sampler' status; 2: setrlimit failed";
}

TEST(Monitor, PeakPowerFromSamplesAndCosts) {
  double joules = 0.0;
  MeterSet set;
  set.meters.push_back(std::make_unique<ManualMeter>(&joules));
  EnergyMonitor monitor(std::move(set), MonitorOptions{10, nullptr});
  monitor.begin_window("w");
  joules = 5.0;  // a burst the sampler sees within one interval
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  const Measurement measurement = monitor.end_window("w");
  EXPECT_GE(measurement.peak_w, measurement.average_w);
  EXPECT_GT(measurement.peak_w, 0.0);
  const Json json = with_costs(measurement, Tariff{400.0, 0.25});
  EXPECT_DOUBLE_EQ(json["kwh"].get<double>(), 5.0 / 3.6e6);
  EXPECT_DOUBLE_EQ(json["co2_g"].get<double>(), 5.0 / 3.6e6 * 400.0);
  EXPECT_DOUBLE_EQ(json["cost_usd"].get<double>(), 5.0 / 3.6e6 * 0.25);
  EXPECT_DOUBLE_EQ(accuracy_per_kj(0.9, 2000.0), 0.45);
}

TEST(Monitor, WindowsCountTheirSamples) {
  double joules = 0.0;
  MeterSet set;
  set.meters.push_back(std::make_unique<ManualMeter>(&joules));
  EnergyMonitor monitor(std::move(set), MonitorOptions{10, nullptr});
  monitor.begin_window("empty");
  const Measurement empty = monitor.end_window("empty");
  EXPECT_EQ(empty.samples, 2);  // the two edges
  monitor.begin_window("w");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const Measurement measurement = monitor.end_window("w");
  // ~30 sampler readings at 100 Hz plus the edges; a loaded machine may delay some, never add any.
  EXPECT_GE(measurement.samples, 12);
  EXPECT_LE(measurement.samples, 33);
  const Json json = to_json(measurement);
  EXPECT_EQ(json["samples"].get<int>(), measurement.samples);
  EXPECT_NEAR(json["sample_hz"].get<double>(), (measurement.samples - 1) / measurement.wall_s, 1e-9);
  EXPECT_GE(monitor.total().samples, measurement.samples);
}

}  // namespace ipj::energy
