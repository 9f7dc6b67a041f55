// The seeds' Python training loop (bench/python/seed_train_loop.py on Debian's python3-torch) run as a child
// process, for `ipj compare --python-baseline`: the seed recipe in Python, one epoch, its samples/s. Limits:
// zoo mlp and cnn on IDX data only (what the script has); its stderr passes through to ipj's.
#pragma once

#include <string>

#include "ipj/core/json_io.hpp"
#include "ipj/data/dataset.hpp"
#include "ipj/train/train_config.hpp"

namespace ipj::train {

struct PythonBaseline {
  std::string python = "/usr/bin/python3";  // an interpreter with torch
  std::string script;                       // seed_train_loop.py
};

// Runs the script on the recipe's model, data, seed, limits and threads (0: torch's default) for one epoch
// and returns the JSON object it prints: {"model", "samples", "train_wall_s", "samples_per_s", "test_acc",
// "threads"}. Throws ipj::Error: usage for a model or data set the script does not have, runtime when it
// cannot be started or fails.
Json run_python_seed_loop(const PythonBaseline& baseline, const TrainConfig& recipe,
                          const data::Dataset& dataset);

}  // namespace ipj::train
