// Logging for ipj: spdlog to stderr (stdout is reserved for results and --json objects).
// Level from set_log_level() or the IPJ_LOG_LEVEL environment variable (trace|debug|info|warn|error|off).
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace ipj {

// Configures the default spdlog logger to write to stderr; idempotent. Throws ipj::Error(usage) on a bad
// level.
void init_logging(const std::string& level = "");

// What the calling thread's log lines are about ("model 'resnet'"): shared code that logs while serving one
// of several models (an engine race switching, a runtime built for fewer threads) starts its lines with
// log_prefix(), "model 'resnet': ", or "" where nothing is set. Thread-local; a LogContext sets it for its
// scope (nests).
std::string log_prefix();
std::string log_context();  // the context itself ("model 'resnet'"; "" where none): to carry it to a thread
class LogContext {
 public:
  explicit LogContext(std::string context);
  ~LogContext();
  LogContext(const LogContext&) = delete;
  LogContext& operator=(const LogContext&) = delete;

 private:
  std::string previous_;
};

}  // namespace ipj
