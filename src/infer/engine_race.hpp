// Private to infer: which of two engines runs a batch route's calls, decided call by call from what they cost
// now (medians of recent calls seeded with the load-time timings), with rare probes of the other engine.
// Limits: one number per engine (time per full batch); thread-safe behind one mutex.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

#include "ipj/infer/xnnpack_runtime.hpp"  // kEngineProbeFirstS, kEngineProbeLongestS

namespace ipj::infer {

enum class RaceSide { chosen, xnnpack };

// The engine ahead runs; the other gets a probe once it is due. A side's time is the median of its last three
// calls (seeded with the load-time timing): one slow call of any size (a scheduler hiccup, a worker woken
// from a deep sleep) switches nothing, two do. A probe is three calls of the side behind: the first wakes its
// threads and brings its weights back into cache (not counted), the slower of the other two replaces that
// side's history (stale), so a pool that only sometimes gets the core it waits for does not win on one lucky
// call. The side behind takes over when its time is >= 10% lower. Probes come 1 s after a switch, then 2, 4
// ... 32 s while the side stays behind; a side that won the lead in the race and loses it again within 32 s
// (flapping: a neighbour on the pool's core) keeps the doubled interval instead of starting again at 1 s. So
// a pool that waits for busy cores (XNNPACK's: a second per call beside neighbours) loses after two calls,
// and a slowdown both sides share (the server's own load) switches nothing.
class EngineRace {
 public:
  // Load-time milliseconds per full batch of each side; `label` names the route in the log ("batch 64").
  EngineRace(double chosen_ms, double xnnpack_ms, std::string label);
  // Which side runs this call, and whether it is a probe call of the side behind (then record() or
  // cancel_probe() must follow: no other probe call goes out before).
  struct Pick {
    RaceSide side = RaceSide::xnnpack;
    bool probe = false;
  };
  Pick pick();
  // What a call of `side` took, per full batch (probe: as picked); logs a switch.
  void record(RaceSide side, double full_batch_ms, bool probe);
  void cancel_probe();  // the probe call picked could not run (another call held the runtime): retried

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr int kRecentCalls = 3;
  double time_ms(RaceSide side) const;  // the median of its recent calls
  void switch_if_overtaken(bool probed);
  std::mutex mutex_;
  std::array<std::array<double, kRecentCalls>, 2> recent_ms_{};  // [side][call], a ring per side
  std::array<int, 2> next_slot_{};
  RaceSide ahead_ = RaceSide::xnnpack;
  int probe_calls_left_ = 0;       // of the current probe (3 when one starts)
  double probe_first_ms_ = 0.0;    // its first counted call
  bool probe_out_ = false;         // a probe call is running
  Clock::time_point lead_won_at_;  // when the side ahead took the lead in the race (epoch: it led from load)
  double probe_interval_s_ = kEngineProbeFirstS;
  Clock::time_point next_probe_;
  std::string label_;
};

}  // namespace ipj::infer
