// Output helpers shared by subcommands.
#include "cli_support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iostream>

#include "ipj/infer/inference_model.hpp"

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

const char* const kInputShapeHelp =
    "TorchScript --model: what its forward takes per sample, C,H,W (the data's images, the default) or a "
    "flat size N (batches become [B, N])";

models::ModelSource parse_model_flags(const std::string& model, const std::string& input_shape,
                                      const std::string& model_flag) {
  const std::vector<std::int64_t> shape =
      input_shape.empty() ? std::vector<std::int64_t>{} : infer::parse_shape(input_shape, "--input-shape");
  return models::parse_model_source(model, shape, model_flag);
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

std::vector<std::string> given_config_keys(const CLI::App& command) {
  std::vector<std::string> keys;
  for (const CLI::Option* option : command.get_options()) {
    if (option->count() == 0 || option->get_lnames().empty()) continue;
    std::string key = option->get_lnames().front();
    std::replace(key.begin(), key.end(), '-', '_');
    if (key == "thread_plan") key = "tune_threads";
    if (key == "no_energy") key = "measure_energy";
    keys.push_back(key);
  }
  return keys;
}

std::string format_number(const char* pattern, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, pattern, value);
  return buffer;
}

}  // namespace ipj::cli
