// LibTorch's warnings (TORCH_WARN) shown once each: a model whose every forward warns (an out= tensor
// resized, a deprecated call) would otherwise flood stderr and server logs. Limits: LibTorch's handler is per
// thread, so this covers the thread that installs it (ipj's main thread), not OpenMP workers.
#pragma once

#include <cstddef>

namespace ipj::device {

// Routes the calling thread's LibTorch warnings to spdlog's warn level, each distinct one (source location
// and text) once, with a note that repeats are not shown. Idempotent.
void show_each_torch_warning_once();

// How many LibTorch warnings the handler has seen in this process, shown or not (for tests).
std::size_t torch_warnings_seen();

}  // namespace ipj::device
