// EngineRace (engine_race.hpp): the averages, the probe schedule and the switch rule.
#include "engine_race.hpp"

#include <algorithm>

#include "ipj/core/log.hpp"

namespace ipj::infer {
namespace {

constexpr double kCallWeight = 0.3;    // of a new call in its side's average
constexpr double kSwitchMargin = 0.9;  // the side behind takes over at <= 90% of the ahead side's average

int index_of(RaceSide side) {
  return side == RaceSide::xnnpack ? 1 : 0;
}

RaceSide other(RaceSide side) {
  return side == RaceSide::xnnpack ? RaceSide::chosen : RaceSide::xnnpack;
}

const char* name_of(RaceSide side) {
  return side == RaceSide::xnnpack ? "XNNPACK's runtime" : "the chosen engine";
}

}  // namespace

EngineRace::EngineRace(double chosen_ms, double xnnpack_ms, std::string label)
    : average_ms_{chosen_ms, xnnpack_ms},
      ahead_(xnnpack_ms <= chosen_ms ? RaceSide::xnnpack : RaceSide::chosen),
      next_probe_(Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(kEngineProbeFirstS))),
      label_(std::move(label)) {}

EngineRace::Pick EngineRace::pick() {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (!probing_ && Clock::now() >= next_probe_) {
    probing_ = true;
    return {other(ahead_), true};
  }
  return {ahead_, false};
}

void EngineRace::cancel_probe() {
  const std::lock_guard<std::mutex> lock(mutex_);
  probing_ = false;
}

void EngineRace::record(RaceSide side, double full_batch_ms, bool probe) {
  const std::lock_guard<std::mutex> lock(mutex_);
  double& average = average_ms_[index_of(side)];
  // a probe's side has no recent calls: its average is this call (a side that just fell behind keeps
  // blending: its last calls are recent)
  average = probe ? full_batch_ms : (1.0 - kCallWeight) * average + kCallWeight * full_batch_ms;
  const RaceSide behind = other(ahead_);
  const bool overtaken = average_ms_[index_of(behind)] <= kSwitchMargin * average_ms_[index_of(ahead_)];
  if (overtaken) {
    spdlog::info("{}: {} now runs it ({:.3f} ms per batch lately vs {:.3f} ms on {})", label_,
                 name_of(behind), average_ms_[index_of(behind)], average_ms_[index_of(ahead_)],
                 name_of(ahead_));
    ahead_ = behind;
    probe_interval_s_ = kEngineProbeFirstS;
  } else if (probe) {
    probe_interval_s_ = std::min(2.0 * probe_interval_s_, kEngineProbeLongestS);
  }
  if (probe) probing_ = false;
  if (probe || overtaken) {
    next_probe_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(probe_interval_s_));
  }
}

}  // namespace ipj::infer
