// `ipj train --repeat K`: K runs with seeds seed..seed+K-1, summarised MLPerf/DAWNBench style (median and
// range of time and energy to the target; runs that never reached it are counted, never dropped silently).
#pragma once

#include <vector>

#include "ipj/core/json_io.hpp"
#include "ipj/data/dataset.hpp"
#include "ipj/train/trainer.hpp"

namespace ipj::train {

// {"median", "min", "max", "count"} of the numbers among `values` (nulls skipped); null when there are none.
Json spread(const std::vector<Json>& values);

// Runs config `repeats` times (seed + i, out_dir/seed-<seed+i> when out_dir is set) and returns the report:
// {"schema_version", "kind": "train-repeat", "config", "runs": [{"seed", "final"}], "summary": {...}}.
Json run_repeated(const TrainConfig& config, int repeats, const data::Dataset& dataset,
                  const TrainHooks& hooks);

}  // namespace ipj::train
