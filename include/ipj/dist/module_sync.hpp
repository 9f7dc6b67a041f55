// Keeping a model identical across the ranks of a data-parallel job: rank 0's weights at the start, and one
// set of BatchNorm statistics at each epoch's end (ranks train with local statistics, as DDP without
// SyncBatchNorm does; the running averages are then averaged so that evaluation and checkpoints see one
// model).
#pragma once

#include <torch/nn/module.h>

namespace ipj::dist {

class ProcessGroupContext;

// Every rank's parameters and buffers become rank 0's (in place, no autograd).
void broadcast_module_state(ProcessGroupContext& context, torch::nn::Module& module);
// Floating-point buffers (running mean/var) replaced by their mean over ranks; integer buffers (batch
// counters) by rank 0's.
void average_module_buffers(ProcessGroupContext& context, torch::nn::Module& module);

}  // namespace ipj::dist
