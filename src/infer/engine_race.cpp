// EngineRace (engine_race.hpp): the recent calls' medians, the probe schedule and the switch rule.
#include "engine_race.hpp"

#include <algorithm>
#include <vector>

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

}  // namespace

const char* EngineRace::name_of(RaceSide side) const {
  return side == RaceSide::xnnpack ? runtime_.c_str() : "the chosen engine";
}

EngineRace::EngineRace(double chosen_ms, double xnnpack_ms, std::string label, std::string runtime)
    : ahead_(xnnpack_ms <= chosen_ms ? RaceSide::xnnpack : RaceSide::chosen),
      next_probe_(Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(kEngineProbeFirstS))),
      label_(std::move(label)),
      runtime_(std::move(runtime)) {
  history_[index_of(RaceSide::chosen)].reset(chosen_ms, Clock::now());
  history_[index_of(RaceSide::xnnpack)].reset(xnnpack_ms, Clock::now());
}

void EngineRace::History::reset(double ms, Clock::time_point at) {
  calls.assign(kFewestCalls, {ms, at});
  median = ms;
  stale = false;
}

void EngineRace::History::add(double ms, Clock::time_point at) {
  calls.push_back({ms, at});
  const Clock::time_point window_start =
      at - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(kWindowMs));
  while (calls.size() > kFewestCalls && (calls.size() > kMostCalls || calls.front().at < window_start))
    calls.pop_front();
  stale = true;
}

double EngineRace::History::median_ms() {
  if (stale) {
    std::vector<double> values;
    values.reserve(calls.size());
    for (const Call& call : calls)
      values.push_back(call.ms);
    std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
    median = values[values.size() / 2];
    stale = false;
  }
  return median;
}

double EngineRace::time_ms(RaceSide side) {
  return history_[index_of(side)].median_ms();
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
  History& history = history_[index_of(side)];
  const Clock::time_point now = Clock::now();
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
    // the side behind has no recent calls: its history is the slower of the two counted ones (one probe
    // call goes out at a time, so probe_calls_left_ is 1 here; 0 would count the call alone)
    history.reset(probe_calls_left_ == 1 ? std::max(probe_first_ms_, full_batch_ms) : full_batch_ms, now);
    probe_calls_left_ = 0;
  } else {
    history.add(full_batch_ms, now);
    // the side ahead now costs more than the other's history says the other does (the median of its recent
    // calls, measured only when this call was slow): that history is older, so the other is probed at once
    // and takes over only if its fresh calls beat these (a slowdown both share switches nothing)
    const double behind_ms = time_ms(other(ahead_));
    if (side == ahead_ && probe_calls_left_ == 0 && behind_ms <= kSwitchMargin * full_batch_ms &&
        behind_ms <= kSwitchMargin * time_ms(ahead_))
      next_probe_ = now;
    return;
  }
  decide_after_probe();
}

void EngineRace::decide_after_probe() {
  const RaceSide behind = other(ahead_);
  if (time_ms(behind) <= kSwitchMargin * time_ms(ahead_)) {
    spdlog::info("{}{}: {} now runs it ({:.3f} ms per batch lately vs {:.3f} ms on {})", log_prefix(), label_,
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
  } else {
    probe_interval_s_ = std::min(2.0 * probe_interval_s_, kEngineProbeLongestS);
  }
  next_probe_ = Clock::now() +
                std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(probe_interval_s_));
}

}  // namespace ipj::infer
