// stderr logger set-up for spdlog.
#include "ipj/core/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <utility>

#include "ipj/core/environment.hpp"
#include "ipj/core/error.hpp"

namespace ipj {

namespace {
thread_local std::string thread_log_context;  // LogContext's, "" when none
}  // namespace

std::string log_prefix() {
  return thread_log_context.empty() ? std::string() : thread_log_context + ": ";
}

std::string log_context() {
  return thread_log_context;
}

LogContext::LogContext(std::string context) : previous_(std::move(thread_log_context)) {
  thread_log_context = std::move(context);
}

LogContext::~LogContext() {
  thread_log_context = std::move(previous_);
}

void init_logging(const std::string& level) {
  static bool initialised = false;
  if (!initialised) {
    auto logger = spdlog::stderr_color_mt("ipj");
    logger->set_pattern("[%H:%M:%S] [%^%l%$] %v");
    spdlog::set_default_logger(logger);
    initialised = true;
  }
  std::string chosen = level;
  if (chosen.empty()) {
    chosen = environment_choice("IPJ_LOG_LEVEL");  // checked, lower case; set but empty: the default
  }
  std::transform(chosen.begin(), chosen.end(), chosen.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });  // DEBUG = debug
  const auto parsed = spdlog::level::from_str(chosen);
  if (parsed == spdlog::level::off && chosen != "off") {
    fail(ErrorCategory::usage,
         "unknown log level '" + chosen +
             "' (IPJ_LOG_LEVEL / --log-level): use trace, debug, info, warn, error or off");
  }
  spdlog::set_level(parsed);
}

}  // namespace ipj
