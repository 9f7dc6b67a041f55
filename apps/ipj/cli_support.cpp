// Output helpers shared by subcommands.
#include "cli_support.hpp"

#include <iostream>

namespace ipj::cli {

void add_output_flags(CLI::App& command, CommonOutputFlags& flags) {
  command.add_flag("--json", flags.json, "Print one JSON object on stdout (human text goes to stderr)");
  command.add_flag("--quiet,-q", flags.quiet, "No progress output on stderr");
}

void print_json(const Json& value) {
  std::cout << value.dump() << std::endl;
}

}  // namespace ipj::cli
