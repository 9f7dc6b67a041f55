// Progress reporting for long work: a redrawn bar on a terminal, plain periodic lines otherwise (CI logs).
// Writes to stderr only; silent when disabled (e.g. --json with --quiet).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace ipj {

class ProgressBar {
 public:
  // `total` units of work labelled `label`; `enabled=false` prints nothing.
  ProgressBar(std::string label, std::int64_t total, bool enabled = true);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // Reports that `done` units are complete; `status` is shown after the bar (e.g. "loss 0.41 12k samples/s").
  // Redraws at most every 100 ms on a TTY; prints a plain line every 10% otherwise.
  void update(std::int64_t done, const std::string& status = "");
  // Ends the bar (a final redraw and a newline on a TTY).
  void finish(const std::string& status = "");

  double elapsed_seconds() const;

 private:
  void draw(std::int64_t done, const std::string& status, bool final_draw);

  std::string label_;
  std::int64_t total_;
  bool enabled_;
  bool is_terminal_;
  bool finished_ = false;
  int last_decile_ = -1;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

// "1m23s", "4.2s", "350ms": a human duration.
std::string format_duration(double seconds);
// "12.3k", "1.20M": a human count.
std::string format_count(double value);

}  // namespace ipj
