// `ipj train --distributed`: train::run_training as one rank of a data-parallel job, through the trainer's
// hooks (no second training loop): the global batch split over the ranks' shards, rank 0's weights broadcast,
// gradients averaged by c10d::Reducer, sharded evaluation, BatchNorm statistics averaged at each epoch's end,
// energy summed over ranks, files written by rank 0 only. CPU (Gloo) and, in CUDA builds, GPU (NCCL).
#pragma once

#include <chrono>

#include "ipj/data/dataset.hpp"
#include "ipj/dist/environment.hpp"
#include "ipj/dist/process_group.hpp"
#include "ipj/train/trainer.hpp"

namespace ipj::dist {

struct DataParallelOptions {
  Backend backend = Backend::gloo;
  std::chrono::milliseconds timeout = std::chrono::seconds(120);  // rendezvous and every collective
};

// The config one rank trains with: checks that --batch divides by WORLD_SIZE (ipj::Error(usage) otherwise),
// sets world_size, threads (0: this machine's cores / LOCAL_WORLD_SIZE) and, for `--device cuda`, the GPU
// cuda:LOCAL_RANK. Throws ipj::Error(unsupported) for --compile graphs (it records the whole step, so the
// gradients cannot be all-reduced inside it).
train::TrainConfig data_parallel_config(train::TrainConfig config, const DistributedEnvironment& environment);

// Joins the job (rendezvous at MASTER_ADDR:MASTER_PORT) and trains. `config` comes from data_parallel_config;
// `hooks` are the caller's (progress, printing, compiled evaluation), extended with the data-parallel ones.
// Every rank returns the job's result (metrics and energy over all ranks); only rank 0 writes files.
train::TrainResult run_data_parallel_training(const train::TrainConfig& config, const data::Dataset& dataset,
                                              train::TrainHooks hooks,
                                              const DistributedEnvironment& environment,
                                              const DataParallelOptions& options);

}  // namespace ipj::dist
