// Terminal progress bar / plain progress lines on stderr.
#include "ipj/core/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace ipj {

std::string format_duration(double seconds) {
  char buffer[64];
  if (seconds < 1.0) {
    std::snprintf(buffer, sizeof buffer, "%.0fms", seconds * 1000.0);
  } else if (seconds < 60.0) {
    std::snprintf(buffer, sizeof buffer, "%.1fs", seconds);
  } else if (seconds < 3600.0) {
    std::snprintf(buffer, sizeof buffer, "%dm%02ds", static_cast<int>(seconds) / 60,
                  static_cast<int>(seconds) % 60);
  } else {
    std::snprintf(buffer, sizeof buffer, "%dh%02dm", static_cast<int>(seconds) / 3600,
                  (static_cast<int>(seconds) % 3600) / 60);
  }
  return buffer;
}

std::string format_count(double value) {
  char buffer[64];
  if (value >= 1e6) {
    std::snprintf(buffer, sizeof buffer, "%.2fM", value / 1e6);
  } else if (value >= 1e4) {
    std::snprintf(buffer, sizeof buffer, "%.1fk", value / 1e3);
  } else {
    std::snprintf(buffer, sizeof buffer, "%.0f", value);
  }
  return buffer;
}

ProgressBar::ProgressBar(std::string label, std::int64_t total, bool enabled)
    : label_(std::move(label)),
      total_(std::max<std::int64_t>(total, 1)),
      enabled_(enabled),
      is_terminal_(::isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

ProgressBar::~ProgressBar() {
  if (!finished_ && enabled_ && is_terminal_) std::fputc('\n', stderr);
}

double ProgressBar::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void ProgressBar::update(std::int64_t done, const std::string& status) {
  if (!enabled_ || finished_) return;
  const auto now = std::chrono::steady_clock::now();
  if (is_terminal_) {
    if (now - last_draw_ < std::chrono::milliseconds(100) && done < total_) return;
    last_draw_ = now;
    draw(done, status, false);
    return;
  }
  const int decile = static_cast<int>(10 * std::min(done, total_) / total_);
  if (decile == last_decile_) return;
  last_decile_ = decile;
  draw(done, status, false);
}

void ProgressBar::finish(const std::string& status) {
  if (!enabled_ || finished_) return;
  draw(total_, status, true);
  finished_ = true;
}

void ProgressBar::draw(std::int64_t done, const std::string& status, bool final_draw) {
  const double fraction = std::min(1.0, static_cast<double>(done) / static_cast<double>(total_));
  const double elapsed = elapsed_seconds();
  const double eta = fraction > 0.0 ? elapsed * (1.0 - fraction) / fraction : 0.0;
  if (is_terminal_) {
    constexpr int kWidth = 28;
    const int filled = static_cast<int>(fraction * kWidth);
    std::string bar(static_cast<size_t>(filled), '#');
    bar.append(static_cast<size_t>(kWidth - filled), '.');
    std::fprintf(stderr, "\r\033[K%s [%s] %3.0f%% %s ETA %s %s", label_.c_str(), bar.c_str(),
                 fraction * 100.0, format_duration(elapsed).c_str(),
                 final_draw ? "0ms" : format_duration(eta).c_str(), status.c_str());
    if (final_draw) std::fputc('\n', stderr);
  } else {
    std::fprintf(stderr, "%s %3.0f%% %s elapsed, ETA %s %s\n", label_.c_str(), fraction * 100.0,
                 format_duration(elapsed).c_str(), format_duration(final_draw ? 0.0 : eta).c_str(),
                 status.c_str());
  }
  std::fflush(stderr);
}

}  // namespace ipj
