// FLOP counting by observing ATen operators (RecordFunction) while a function runs: works for ipj's models
// and for any TorchScript model. Counts matrix multiplies and convolutions (2 FLOPs per multiply-add);
// elementwise ops, pooling and normalisation are ignored (a few % of the total for these models).
#pragma once

#include <cstdint>
#include <functional>

namespace ipj::models {

// Runs `work` on this thread and returns the FLOPs of aten::addmm / mm / bmm / convolution calls it made.
std::int64_t count_flops(const std::function<void()>& work);

}  // namespace ipj::models
