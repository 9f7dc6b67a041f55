// Private to infer: which of two engines runs a batch route's calls, decided call by call from what they cost
// now (exponential averages seeded with the load-time timings), with rare probe calls of the other engine.
// Limits: one number per engine (time per full batch); thread-safe behind one mutex.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

#include "ipj/infer/xnnpack_runtime.hpp"  // kEngineProbeFirstS, kEngineProbeLongestS

namespace ipj::infer {

enum class RaceSide { chosen, xnnpack };

// The engine ahead runs; the other gets one probe call once its probe is due. A side's calls update its
// average (weight 0.3 per call: one scheduler hiccup does not switch), a probe replaces the probed side's
// average (its history is stale). The side behind takes over when its average is >= 10% lower. So a pool
// that waits for busy cores (XNNPACK's: a second per call beside neighbours) loses after one call and is
// retried at 1, 2, 4 ... 32 s, and a slowdown both sides share (the server's own load) switches nothing.
class EngineRace {
 public:
  // Load-time milliseconds per full batch of each side; `label` names the route in the log ("batch 64").
  EngineRace(double chosen_ms, double xnnpack_ms, std::string label);
  // Which side runs this call, and whether it is the other side's probe (then record() or cancel() must
  // follow: no other probe goes out before).
  struct Pick {
    RaceSide side = RaceSide::xnnpack;
    bool probe = false;
  };
  Pick pick();
  // What a call of `side` took, per full batch (probe: as picked); logs a switch.
  void record(RaceSide side, double full_batch_ms, bool probe);
  void cancel_probe();  // the probe picked could not run (another call held the runtime)

 private:
  using Clock = std::chrono::steady_clock;
  std::mutex mutex_;
  double average_ms_[2];
  RaceSide ahead_ = RaceSide::xnnpack;
  bool probing_ = false;  // a probe call of the side behind is out
  double probe_interval_s_ = kEngineProbeFirstS;
  Clock::time_point next_probe_;
  std::string label_;
};

}  // namespace ipj::infer
