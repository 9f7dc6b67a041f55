// EngineRace (engine_race.hpp): the recent calls' medians, the probe schedule and the switch rule.
#include "engine_race.hpp"

#include <algorithm>

#include "ipj/core/log.hpp"

namespace ipj::infer {
namespace {

constexpr double kSwitchMargin = 0.9;  // the side behind takes over at <= 90% of the ahead side's time

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
    : ahead_(xnnpack_ms <= chosen_ms ? RaceSide::xnnpack : RaceSide::chosen),
      next_probe_(Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(kEngineProbeFirstS))),
      label_(std::move(label)) {
  recent_ms_[index_of(RaceSide::chosen)].fill(chosen_ms);
  recent_ms_[index_of(RaceSide::xnnpack)].fill(xnnpack_ms);
}

double EngineRace::time_ms(RaceSide side) const {
  std::array<double, kRecentCalls> recent = recent_ms_[index_of(side)];
  std::nth_element(recent.begin(), recent.begin() + kRecentCalls / 2, recent.end());
  return recent[kRecentCalls / 2];
}

EngineRace::Pick EngineRace::pick() {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (!probe_out_ && (probe_calls_left_ > 0 || Clock::now() >= next_probe_)) {
    if (probe_calls_left_ == 0) probe_calls_left_ = 3;
    probe_out_ = true;
    return {other(ahead_), true};
  }
  return {ahead_, false};
}

void EngineRace::cancel_probe() {
  const std::lock_guard<std::mutex> lock(mutex_);
  probe_out_ = false;
}

void EngineRace::record(RaceSide side, double full_batch_ms, bool probe) {
  const std::lock_guard<std::mutex> lock(mutex_);
  std::array<double, kRecentCalls>& recent = recent_ms_[index_of(side)];
  if (probe) {
    probe_out_ = false;
    if (probe_calls_left_ == 3) {  // the warm-up call: not counted
      probe_calls_left_ = 2;
      return;
    }
    if (probe_calls_left_ == 2) {
      probe_calls_left_ = 1;
      probe_first_ms_ = full_batch_ms;
      return;
    }
    // the side behind has no recent calls: its history is the slower of the two counted ones (a probe that
    // a switch made moot, probe_calls_left_ 0, counts as a call of its side)
    recent.fill(probe_calls_left_ == 1 ? std::max(probe_first_ms_, full_batch_ms) : full_batch_ms);
    probe_calls_left_ = 0;
  } else {
    int& slot = next_slot_[index_of(side)];
    recent[static_cast<std::size_t>(slot)] = full_batch_ms;
    slot = (slot + 1) % kRecentCalls;
  }
  switch_if_overtaken(probe);
}

void EngineRace::switch_if_overtaken(bool probed) {
  const RaceSide behind = other(ahead_);
  const bool overtaken = time_ms(behind) <= kSwitchMargin * time_ms(ahead_);
  if (overtaken) {
    spdlog::info("{}: {} now runs it ({:.3f} ms per batch lately vs {:.3f} ms on {})", label_,
                 name_of(behind), time_ms(behind), time_ms(ahead_), name_of(ahead_));
    // a lead won in the race and lost within the longest interval: flapping, keep backing off
    const Clock::time_point now = Clock::now();
    const bool flapping = lead_won_at_ != Clock::time_point{} &&
                          now - lead_won_at_ < std::chrono::duration<double>(kEngineProbeLongestS);
    probe_interval_s_ =
        flapping ? std::min(2.0 * probe_interval_s_, kEngineProbeLongestS) : kEngineProbeFirstS;
    ahead_ = behind;
    lead_won_at_ = now;
    probe_calls_left_ = 0;  // a probe of the side now behind starts afresh when due
  } else if (probed) {
    probe_interval_s_ = std::min(2.0 * probe_interval_s_, kEngineProbeLongestS);
  }
  if (probed || overtaken) {
    next_probe_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(probe_interval_s_));
  }
}

}  // namespace ipj::infer
