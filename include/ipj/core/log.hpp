// Logging for ipj: spdlog to stderr (stdout is reserved for results and --json objects).
// Level from set_log_level() or the IPJ_LOG_LEVEL environment variable (trace|debug|info|warn|error|off).
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace ipj {

// Configures the default spdlog logger to write to stderr; idempotent. Throws ipj::Error(usage) on a bad
// level.
void init_logging(const std::string& level = "");

}  // namespace ipj
