// Test helper process for the power-limit tests: starts a thread first (as OpenBLAS does at load time, so a
// signal may land on a thread that does not block it), then sets the GPU power limit through
// PowerLimitControl on the fake NVML library, prints "ready" and waits to be signalled or killed.
// Usage: power_limit_holder NVML_LIBRARY RESTORE_FILE FRACTION   (FAKE_NVML_STATE in the environment)
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "ipj/energy/power_limit.hpp"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s NVML_LIBRARY RESTORE_FILE FRACTION\n", argv[0]);
    return 2;
  }
  std::thread early([] {
    for (;;)
      std::this_thread::sleep_for(std::chrono::seconds(1));
  });
  early.detach();
  ipj::energy::PowerLimitControl control(argv[1], "cuda", argv[2]);
  const double watts = control.set_fraction(std::atof(argv[3]));
  std::printf("ready %.0f\n", watts);
  std::fflush(stdout);
  for (int second = 0; second < 60; ++second)
    std::this_thread::sleep_for(std::chrono::seconds(1));
  return 0;  // not reached in the tests: they signal or kill first
}
