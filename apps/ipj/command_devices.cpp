// `ipj devices`: what this machine offers ipj (CPU ISA, LibTorch build, CUDA, native precisions).
#include <iostream>

#include "cli_support.hpp"
#include "ipj/device/device_report.hpp"
#include "ipj/energy/energy_report.hpp"
#include "ipj/energy/meter.hpp"

namespace ipj::cli {

CLI::App* register_devices_command(CLI::App& app, CommandRunner& runner) {
  auto* command = app.add_subcommand("devices",
                                     "Show CPU features, LibTorch build, GPUs and native precisions\n"
                                     "Example: ipj devices --json");
  static CommonOutputFlags flags;
  add_output_flags(*command, flags);
  command->callback([&runner] {
    runner = [] {
      Json report = device::device_report();
      report["energy_meters"] = energy::to_json(energy::discover_meters().status);
      if (flags.json) {
        print_json(report);
      } else {
        std::cout << device::render_device_report(report);
      }
      return 0;
    };
  });
  return command;
}

}  // namespace ipj::cli
