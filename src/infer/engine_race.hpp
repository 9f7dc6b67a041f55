// Private to infer: which of two engines runs a batch route's calls, decided call by call from what they cost
// now (medians of recent calls seeded with the load-time timings), with rare probes of the other engine.
// Limits: one number per engine (time per full batch); thread-safe behind one mutex.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>

#include "ipj/infer/xnnpack_runtime.hpp"  // kEngineProbeFirstS, kEngineProbeLongestS

namespace ipj::infer {

enum class RaceSide { chosen, xnnpack };

// The engine ahead runs; the other gets a probe once it is due. A side's time is the median of its calls in
// the last 50 ms, at least its last three (seeded with the load-time timing): one slow call of any size (a
// scheduler hiccup, a worker woken from a deep sleep) changes nothing, nor do short calls slowed for less
// than half of 50 ms (a VM's vCPU taken away for a few ms: calls of 0.3 ms ran 1-4 ms three in a row). A
// probe is three calls of the side behind: the first wakes its threads and brings its weights back into cache
// (not counted), the slower of the other two replaces that side's history (stale), so a pool that only
// sometimes gets the core it waits for does not win on one lucky call. Only a probe switches: the side behind
// takes over when its fresh time is >= 10% lower. Probes come 1 s after a switch, then 2, 4 ... 32 s while
// the side stays behind, and at once when the side ahead turns slower than the other's (older) history (two
// slow calls); a side that won the lead in the race and loses it again within 32 s (flapping: a neighbour on
// the pool's core) keeps the doubled interval instead of starting again at 1 s. So a pool that waits for busy
// cores (XNNPACK's: a second per call beside neighbours) loses after two calls and the probe's three, and a
// slowdown both sides share (the server's own load, a few slow seconds of a noisy VM) switches nothing:
// measured before this rule, on a quiet VM, `ipj bench` rows at batch 64 where XNNPACK was twice as fast ran
// 0-1% of their calls on it after such a stretch.
class EngineRace {
 public:
  // Load-time milliseconds per full batch of each side; `label` names the route in the log ("batch 64"),
  // `runtime` the runtime side ("oneDNN's runtime").
  EngineRace(double chosen_ms, double xnnpack_ms, std::string label,
             std::string runtime = "XNNPACK's runtime");
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
  // A side's recent calls: those that ended within kWindowMs of its latest, at least kFewestCalls and at most
  // kMostCalls of them; a probe or the load-time timing resets them to kFewestCalls copies of one value.
  struct History {
    static constexpr std::size_t kFewestCalls = 3, kMostCalls = 128;
    static constexpr double kWindowMs = 50.0;
    struct Call {
      double ms;
      Clock::time_point at;
    };
    std::deque<Call> calls;
    double median = 0.0;
    bool stale = false;  // median needs computing again
    void reset(double ms, Clock::time_point at);
    void add(double ms, Clock::time_point at);
    double median_ms();
  };
  double time_ms(RaceSide side);  // the median of its recent calls
  void decide_after_probe();      // the side behind takes over if its fresh calls are >= 10% faster
  std::mutex mutex_;
  std::array<History, 2> history_;  // [side]
  RaceSide ahead_ = RaceSide::xnnpack;
  int probe_calls_left_ = 0;       // of the current probe (3 when one starts)
  double probe_first_ms_ = 0.0;    // its first counted call
  bool probe_out_ = false;         // a probe call is running
  Clock::time_point lead_won_at_;  // when the side ahead took the lead in the race (epoch: it led from load)
  double probe_interval_s_ = kEngineProbeFirstS;
  Clock::time_point next_probe_;
  std::string label_;
  std::string runtime_;
  const char* name_of(RaceSide side) const;
};

}  // namespace ipj::infer
