// `ipj devices`: everything ipj knows about this machine, as one JSON object (also embedded in results files
// as their "environment") and as human text.
#pragma once

#include <string>

#include "ipj/core/json_io.hpp"

namespace ipj::device {

// Probes CPU, LibTorch and CUDA. Keys: cpu{model,cores,logical_processors,features{...},memory_bytes},
// torch{version,onednn,openmp,mkl,intra_op_threads,blas_threads,quantized_engines}, cuda[...],
// mps{available,reason}, native_precisions{cpu[...], cuda{...}}, energy_meters[...] (filled by the energy
// module).
Json device_report();

std::string render_device_report(const Json& report);

}  // namespace ipj::device
