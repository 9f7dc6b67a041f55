// Output helpers shared by subcommands.
#include "cli_support.hpp"

#include <cmath>
#include <cstdio>
#include <ctime>
#include <iostream>

namespace ipj::cli {

void add_output_flags(CLI::App& command, CommonOutputFlags& flags) {
  command.add_flag("--json", flags.json, "Print one JSON object on stdout (human text goes to stderr)");
  command.add_flag("--quiet,-q", flags.quiet, "No progress output on stderr");
}

std::string default_run_folder(const std::string& name) {
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", std::localtime(&now));
  return "runs/" + name + "-" + stamp;
}

CLI::Validator finite_range(double min, double max) {
  const std::string range = "[" + format_number("%g", min) + ", " + format_number("%g", max) + "]";
  return CLI::Validator(
      [min, max, range](std::string& text) -> std::string {
        double value = 0.0;
        if (!CLI::detail::lexical_cast(text, value)) return "'" + text + "' is not a number";
        if (!std::isfinite(value) || value < min || value > max)
          return "'" + text + "' is out of range: give a finite number in " + range;
        return "";
      },
      "NUMBER in " + range);
}

void print_json(const Json& value) {
  std::cout << value.dump() << std::endl;
}

std::string format_number(const char* pattern, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, pattern, value);
  return buffer;
}

}  // namespace ipj::cli
