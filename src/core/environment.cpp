// The table of ipj's environment variables and their checked readers (environment.hpp). Values are read with
// getenv each time (the CLI's two starts and tests change them); nothing here caches.
#include "ipj/core/environment.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "ipj/core/error.hpp"

namespace ipj {
namespace {

const EnvironmentVariable& described(const char* name) {
  for (const EnvironmentVariable& variable : environment_variables())
    if (std::strcmp(variable.name, name) == 0) return variable;
  fail(ErrorCategory::internal, std::string("environment variable ") + name + " is not in ipj's table");
}

// The value, or "" when unset (set but empty reads as unset: `VAR= ipj ...` is the usual way to clear one).
std::string value_of(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

std::string lower_case(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

[[noreturn]] void refuse(const char* name, const std::string& value, const std::string& expected) {
  const std::string shown = value.size() > 40 ? value.substr(0, 40) + "..." : value;
  fail(ErrorCategory::usage, std::string(name) + "='" + shown + "' is not " + expected +
                                 "; unset it for the default (" + described(name).help + ")");
}

// "a|b|c" -> "a, b or c"
std::string spoken_list(const std::string& values) {
  std::string list;
  std::size_t start = 0;
  while (start <= values.size()) {
    const std::size_t end = std::min(values.find('|', start), values.size());
    if (!list.empty()) list += end == values.size() ? " or " : ", ";
    list += values.substr(start, end - start);
    start = end + 1;
  }
  return list;
}

}  // namespace

const std::vector<EnvironmentVariable>& environment_variables() {
  static const std::vector<EnvironmentVariable> variables{
      {"IPJ_LOG_LEVEL", EnvironmentKind::choice, "info|trace|debug|warn|error|off",
       "the log level; --log-level overrides it"},
      {"IPJ_WAIT_POLICY", EnvironmentKind::choice, "auto|passive|short-spin",
       "how OpenMP's and OpenBLAS's idle threads wait (docs/CLI.md)"},
      {"IPJ_NO_REEXEC", EnvironmentKind::on_off, "",
       "on: no second start with a chosen wait policy; libgomp's own default runs"},
      {"IPJ_STATIC_THREADS", EnvironmentKind::on_off, "",
       "on: thread plans ignore the machine's load (bit-identical reruns on a machine whose load varies)"},
      {"IPJ_CPU_TDP_W", EnvironmentKind::positive_number, "",
       "the CPU package power in watts the energy estimate uses where no sensor exists"},
      {"IPJ_POWERCAP_ROOT", EnvironmentKind::path, "", "where RAPL's powercap tree is (/sys/class/powercap)"},
      {"IPJ_NVML_LIBRARY", EnvironmentKind::path, "", "the NVML library to load (libnvidia-ml.so.1)"},
      {"IPJ_ONNXRUNTIME_NODE", EnvironmentKind::path, "",
       "the node_modules folder holding onnxruntime-node, for export --verify"},
      {"IPJ_SEED_TRAIN_LOOP", EnvironmentKind::path, "",
       "the seeds' Python training loop compare runs (bench/python/seed_train_loop.py)"},
  };
  return variables;
}

bool environment_switch(const char* name) {
  (void)described(name);  // an unlisted name is a bug, whatever its value
  const std::string value = lower_case(value_of(name));
  if (value.empty() || value == "0" || value == "no" || value == "false" || value == "off") return false;
  if (value == "1" || value == "yes" || value == "true" || value == "on") return true;
  refuse(name, value_of(name), "a switch: use 1 (on) or 0 (off) (yes/no, true/false, on/off also read)");
}

std::optional<double> environment_number(const char* name) {
  (void)described(name);
  const std::string value = value_of(name);
  if (value.empty()) return std::nullopt;
  char* end = nullptr;
  const double number = std::strtod(value.c_str(), &end);
  if (end == value.c_str() || *end != '\0' || !std::isfinite(number) || number <= 0.0)
    refuse(name, value, "a positive number");
  return number;
}

std::string environment_choice(const char* name) {
  const std::string values = described(name).values;
  const std::string value = lower_case(value_of(name));
  if (value.empty()) return values.substr(0, values.find('|'));
  std::size_t start = 0;
  while (start <= values.size()) {
    const std::size_t end = std::min(values.find('|', start), values.size());
    if (values.compare(start, end - start, value) == 0) return value;
    start = end + 1;
  }
  refuse(name, value_of(name), "one of " + spoken_list(values) + " (any case)");
}

void check_environment() {
  for (const EnvironmentVariable& variable : environment_variables()) {
    switch (variable.kind) {
      case EnvironmentKind::on_off:
        environment_switch(variable.name);
        break;
      case EnvironmentKind::choice:
        environment_choice(variable.name);
        break;
      case EnvironmentKind::positive_number:
        environment_number(variable.name);
        break;
      case EnvironmentKind::path:
        break;  // any text; the reader names the file it could not use
    }
  }
}

}  // namespace ipj
