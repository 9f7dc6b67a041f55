// The search's decisions: which point to try next (the start recipe, then random points, then local moves
// around the best trials; seeded, so that the same history gives the same proposal) and when to stop a
// trial early (asynchronous successive halving on the learning curve). LibTorch-free, no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ipj/tune/search_space.hpp"
#include "ipj/tune/trial.hpp"

namespace ipj::tune {

// What ranking and pruning need of a trial (finished, or in progress with the epochs so far).
struct TrialSummary {
  int trial = 0;
  Point point;
  bool failed = false;
  std::vector<EpochPoint> epochs;
  bool reached = false;             // test accuracy reached the target
  int target_epoch = 0;             // the first epoch that reached it
  double energy_to_target_j = 0.0;  // cumulative epoch joules up to target_epoch
  double time_to_target_s = 0.0;
};

// Fills reached / target_epoch / energy and time to target from summary.epochs.
void settle_target(TrialSummary& summary, double target_acc);

// Smaller is better: trials that reached the target by joules to it (ties: time), then the others by the
// best accuracy they showed, then failed trials.
struct RankKey {
  int tier = 2;
  double first = 0.0;
  double second = 0.0;
  bool operator<(const RankKey& other) const;
};
RankKey rank_key(const TrialSummary& summary);

// Rungs are at min_epochs * eta^k epochs.
bool is_rung(int epoch, const SearchSettings& settings);

struct StopDecision {
  bool stop = false;
  std::string status;  // "pruned"
  std::string reason;  // for the record and the progress line
};

// Successive halving at a rung: `current` (epochs so far, not yet at the target) continues when it ranks in
// the best max(1, n / eta) of the n trials with a value at this rung (itself included), judged by the
// target reached by then (joules) or else accuracy at this epoch. No pruning while n < eta.
StopDecision successive_halving(const std::vector<TrialSummary>& finished, const TrialSummary& current,
                                const SearchSettings& settings);

// Proposals: trial 0 is the space's start point; the next settings.initial_random - 1 are uniform random;
// after that 70% are local moves (one or two dimensions changed, numeric ones to a neighbouring value) of
// one of the three best trials, 30% random. Never a point already tried; nullopt once every point was.
class Proposer {
 public:
  Proposer(const SearchSpace& space, std::uint64_t seed) : space_(space), seed_(seed) {}
  std::optional<Point> propose(int trial_index, const std::vector<TrialSummary>& history) const;

 private:
  const SearchSpace& space_;
  std::uint64_t seed_;
};

}  // namespace ipj::tune
