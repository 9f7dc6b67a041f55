// ipj's own environment variables: one table (name, kind, accepted values, help) and the checked readers the
// modules use. A value ipj cannot read is a usage error naming the variable, never silently ignored. The
// marks ipj passes between its two starts (IPJ_REEXEC, IPJ_WAIT_POLICY_SET, ...) are internal and not listed.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ipj {

enum class EnvironmentKind {
  on_off,           // 1/yes/true/on or 0/no/false/off (any case); unset or empty: off
  choice,           // one of `values` ("a|b|c", any case); unset or empty: the first
  positive_number,  // a finite number > 0
  path,             // any text naming a file or program
};

struct EnvironmentVariable {
  const char* name;
  EnvironmentKind kind;
  const char* values;  // choice: "a|b|c"; else empty
  const char* help;
};

// Every variable ipj reads (docs/CLI.md "Environment" lists the same).
const std::vector<EnvironmentVariable>& environment_variables();

// Reads every listed variable once through its kind's reader: the first bad value throws ipj::Error(usage)
// "<NAME>='<value>' ...: use ...". The CLI calls it before a command runs.
void check_environment();

// An on_off variable: false when unset or empty.
bool environment_switch(const char* name);

// A positive_number variable: nullopt when unset or empty.
std::optional<double> environment_number(const char* name);

// A choice variable, lower-cased: the first value when unset or empty.
std::string environment_choice(const char* name);

}  // namespace ipj
