// Proposals (seeded random and local moves) and successive-halving decisions.
#include "ipj/tune/scheduler.hpp"

#include <algorithm>
#include <cstdio>
#include <set>

namespace ipj::tune {
namespace {

// SplitMix64 (Steele, Lea, Flood 2014): a small, well-mixed generator whose stream depends on the seed only,
// the same with every standard library.
class SplitMix {
 public:
  explicit SplitMix(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  int below(int count) { return static_cast<int>(next() % static_cast<std::uint64_t>(count)); }
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  std::uint64_t state_;
};

std::optional<RankKey> rung_value(const TrialSummary& summary, int rung_epoch) {
  if (summary.failed) return std::nullopt;
  if (summary.reached && summary.target_epoch <= rung_epoch)
    return RankKey{0, summary.energy_to_target_j, summary.time_to_target_s};
  for (const auto& epoch : summary.epochs)
    if (epoch.epoch == rung_epoch) return RankKey{1, -epoch.test_acc, 0.0};
  return std::nullopt;
}

Point random_point(const SearchSpace& space, SplitMix& random) {
  Point point;
  for (const auto& dimension : space.dimensions)
    point.push_back(random.below(static_cast<int>(dimension.values.size())));
  return point;
}

// Changes one dimension: numeric ones to a neighbouring value, others to any other value.
void move_one(const SearchSpace& space, Point& point, SplitMix& random) {
  std::vector<size_t> movable;
  for (size_t index = 0; index < space.dimensions.size(); ++index)
    if (space.dimensions[index].values.size() > 1) movable.push_back(index);
  if (movable.empty()) return;
  const size_t index = movable[static_cast<size_t>(random.below(static_cast<int>(movable.size())))];
  const int count = static_cast<int>(space.dimensions[index].values.size());
  int& value = point[index];
  if (is_numeric(space.dimensions[index])) {
    const int step = random.below(2) == 0 ? 1 : -1;
    value = (value + step >= 0 && value + step < count) ? value + step : value - step;
  } else {
    value = (value + 1 + random.below(count - 1)) % count;
  }
}

}  // namespace

void settle_target(TrialSummary& summary, double target_acc) {
  summary.reached = false;
  double joules = 0.0, seconds = 0.0;
  for (const auto& epoch : summary.epochs) {
    joules += epoch.energy_j;
    seconds += epoch.wall_s;
    if (target_acc > 0.0 && epoch.test_acc >= target_acc) {
      summary.reached = true;
      summary.target_epoch = epoch.epoch;
      summary.energy_to_target_j = joules;
      summary.time_to_target_s = seconds;
      return;
    }
  }
}

bool RankKey::operator<(const RankKey& other) const {
  if (tier != other.tier) return tier < other.tier;
  if (first != other.first) return first < other.first;
  return second < other.second;
}

RankKey rank_key(const TrialSummary& summary) {
  if (summary.failed) return {2, 0.0, 0.0};
  if (summary.reached) return {0, summary.energy_to_target_j, summary.time_to_target_s};
  double best_acc = 0.0, joules = 0.0;
  for (const auto& epoch : summary.epochs) {
    best_acc = std::max(best_acc, epoch.test_acc);
    joules += epoch.energy_j;
  }
  return {1, -best_acc, joules};
}

bool is_rung(int epoch, const SearchSettings& settings) {
  for (long rung = settings.min_epochs; rung <= epoch; rung *= settings.eta)
    if (rung == epoch) return true;
  return false;
}

StopDecision successive_halving(const std::vector<TrialSummary>& finished, const TrialSummary& current,
                                const SearchSettings& settings) {
  if (current.epochs.empty()) return {};
  const EpochPoint& last = current.epochs.back();
  if (!is_rung(last.epoch, settings)) return {};
  const RankKey mine{1, -last.test_acc, 0.0};
  int count = 1, better = 0;
  for (const auto& other : finished) {
    const auto value = rung_value(other, last.epoch);
    if (!value) continue;
    ++count;
    if (*value < mine) ++better;
  }
  if (count < settings.eta) return {};  // too few trials at this rung to judge
  const int keep = std::max(1, count / settings.eta);
  if (better < keep) return {};
  char reason[160];
  std::snprintf(
      reason, sizeof reason,
      "rung at epoch %d: accuracy %.4f ranks %d of %d trials there; successive halving keeps the best %d",
      last.epoch, last.test_acc, better + 1, count, keep);
  return {true, "pruned", reason};
}

std::optional<Point> Proposer::propose(int trial_index, const std::vector<TrialSummary>& history) const {
  std::set<std::string> tried;
  for (const auto& summary : history)
    tried.insert(point_key(summary.point));
  const double size = space_size(space_);
  if (static_cast<double>(tried.size()) >= size) return std::nullopt;
  const Point start = start_point(space_);
  if (!tried.count(point_key(start))) return start;

  SplitMix random(seed_ ^ (0xD1B54A32D192ED03ULL * static_cast<std::uint64_t>(trial_index + 1)));
  std::vector<const TrialSummary*> parents;
  for (const auto& summary : history)
    if (!summary.failed && summary.point.size() == space_.dimensions.size()) parents.push_back(&summary);
  std::stable_sort(parents.begin(), parents.end(),
                   [](const TrialSummary* a, const TrialSummary* b) { return rank_key(*a) < rank_key(*b); });
  if (parents.size() > 3) parents.resize(3);
  const bool local = trial_index >= space_.settings.initial_random && !parents.empty() && random.unit() < 0.7;
  if (local) {
    for (int attempt = 0; attempt < 64; ++attempt) {
      Point point = parents[static_cast<size_t>(random.below(static_cast<int>(parents.size())))]->point;
      move_one(space_, point, random);
      if (random.unit() < 0.25) move_one(space_, point, random);
      if (!tried.count(point_key(point))) return point;
    }
  }
  for (int attempt = 0; attempt < 256; ++attempt) {
    Point point = random_point(space_, random);
    if (!tried.count(point_key(point))) return point;
  }
  // A nearly exhausted space: walk it in order from a random point to the first untried one.
  const std::uint64_t points = static_cast<std::uint64_t>(size);
  const std::uint64_t offset = random.next() % points;
  for (std::uint64_t step = 0; step < std::min<std::uint64_t>(points, 10'000'000); ++step) {
    std::uint64_t code = (offset + step) % points;
    Point point;
    for (const auto& dimension : space_.dimensions) {
      point.push_back(static_cast<int>(code % dimension.values.size()));
      code /= dimension.values.size();
    }
    if (!tried.count(point_key(point))) return point;
  }
  return std::nullopt;
}

}  // namespace ipj::tune
