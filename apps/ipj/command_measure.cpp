// `ipj measure -- CMD ARGS...`: the energy, time and cost of any command and every process it starts; exits
// with the command's status (126/127 when it cannot be started).
#include <iostream>

#include "cli_support.hpp"
#include "ipj/core/text_table.hpp"
#include "ipj/energy/command_runner.hpp"
#include "ipj/energy/energy_report.hpp"

namespace ipj::cli {

CLI::App* register_measure_command(CLI::App& app, CommandRunner& runner) {
  auto* command = app.add_subcommand(
      "measure",
      "Run a command and report its wall time, joules per device (with source), watts, kWh, CO2 and cost\n"
      "Example: ipj measure --json --grid-g-per-kwh 400 -- python3 train.py --epochs 1");
  static CommonOutputFlags flags;
  static int interval_ms = 100;
  static double grid = -1.0, price = -1.0, tdp = 0.0;
  static std::vector<std::string> target;
  static bool no_wait_descendants = false;
  add_output_flags(*command, flags);
  command->add_option("--interval-ms", interval_ms, "Sampling period of the meters")
      ->check(positive_integer(10000))
      ->capture_default_str();
  command->add_option("--grid-g-per-kwh", grid, "Grid carbon intensity (gCO2e/kWh) for the CO2 figure")
      ->check(finite_range(0.0, 1e5));
  command->add_option("--usd-per-kwh", price, "Electricity price for the cost figure")
      ->check(finite_range(0.0, 1e5));
  command->add_option("--cpu-tdp-w", tdp, "CPU power at full load for the estimate (default: 10 W per CPU)")
      ->check(finite_range(1e-3, 1e5));
  command->add_flag("--no-wait-descendants", no_wait_descendants,
                    "Stop when the command exits, even if processes it started in the background still run");
  command->add_option("command", target, "The command to run, after --")->required();
  command->callback([&runner] {
    runner = [] {
      energy::MeterOptions options;
      options.cpu_tdp_w = tdp;
      const energy::CommandMeasurement result =
          energy::measure_command(target, options, interval_ms, !no_wait_descendants);
      if (!result.started) {
        std::cerr << "ipj: error: cannot run '" << target[0] << "': " << result.start_error
                  << (result.exit_code == 127 ? " (check the command name and PATH)"
                                              : " (check that it is an executable file)")
                  << "; exit " << result.exit_code << std::endl;
        return result.exit_code;
      }
      energy::Tariff tariff;
      if (grid >= 0) tariff.grid_g_per_kwh = grid;
      if (price >= 0) tariff.usd_per_kwh = price;
      Json json = {{"schema_version", kResultsSchemaVersion}, {"kind", "measure"}};
      json.update(energy::with_costs(result.energy, tariff));
      json.erase("name");
      json["exit_code"] = result.exit_code;
      json["command"] = target;
      json["waited_for_descendants"] = result.waited_for_descendants;
      json["descendants_waited"] = result.descendants_waited;
      json["descendants_running"] = result.descendants_running;
      json["forwarded_signals"] = result.forwarded_signals;
      json["meters"] = energy::to_json(result.meters);
      if (flags.json) {
        print_json(json);
      } else {
        TextTable table({"device", "kind", "energy J", "avg W", "peak W", "source"});
        for (const auto& device : result.energy.devices) {
          table.add_row({device.name + (device.in_total ? "" : " (in another domain)"), device.kind,
                         format_number("%.2f", device.energy_j), format_number("%.2f", device.average_w),
                         format_number("%.2f", device.peak_w), energy::source_name(device.source)});
        }
        std::cerr << table.render();
        std::fprintf(stderr, "total %s in %.3f s, %.2f W average, %.3g kWh",
                     energy::describe_energy(result.energy.energy_j, result.energy.source).c_str(),
                     result.energy.wall_s, result.energy.average_w, json["kwh"].get<double>());
        if (json.contains("co2_g")) std::fprintf(stderr, ", %.3g gCO2e", json["co2_g"].get<double>());
        if (json.contains("cost_usd")) std::fprintf(stderr, ", $%.3g", json["cost_usd"].get<double>());
        std::fprintf(stderr, "; exit status %d\n", result.exit_code);
        if (result.waited_for_descendants)
          std::fprintf(stderr, "waited for the command and every process it started (%d more)\n",
                       result.descendants_waited);
        else
          std::fprintf(
              stderr,
              "stopped at the command's exit (--no-wait-descendants): %d of its processes still run\n",
              result.descendants_running);
        for (const auto& name : result.forwarded_signals)
          std::fprintf(stderr, "forwarded %s to the command's processes\n", name.c_str());
        for (const auto& device : result.energy.devices)
          if (!device.model.empty())
            std::fprintf(stderr, "%s: %s\n", device.name.c_str(), device.model.c_str());
      }
      return result.exit_code;
    };
  });
  return command;
}

}  // namespace ipj::cli
