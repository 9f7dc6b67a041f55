// `--flag NAME` options whose value is a named choice (core/choice.hpp): parsed into the enum while CLI11
// parses, so a bad spelling is a usage error (exit 2) that names the flag and lists the spellings.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "ipj/core/choice.hpp"

namespace ipj::cli {

// Adds `flag` to `command`, storing the parsed choice in `value` (whose current value is the default shown
// in --help).
template <typename Enum>
CLI::Option* add_choice_option(CLI::App& command, const std::string& flag, Enum& value,
                               const std::string& help) {
  CLI::Option* option = command.add_option_function<std::string>(
      flag,
      [&value, flag](const std::string& text) {
        try {
          value = parse_choice<Enum>(text, flag);
        } catch (const Error& error) {
          throw CLI::ValidationError(error.what());
        }
      },
      help);
  option->type_name("TEXT");
  option->default_str(choice_name(value));
  return option;
}

}  // namespace ipj::cli
