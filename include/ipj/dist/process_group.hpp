// A c10d process group for a data-parallel job: TCPStore rendezvous at MASTER_ADDR:MASTER_PORT (rank 0 hosts
// it), then ProcessGroupGloo (CPU) or ProcessGroupNCCL (GPU, IPJ_WITH_CUDA builds only), both with timeouts
// so that a missing or dead peer ends in a clear error rather than a hang; and the few collectives the
// trainer needs (broadcast from rank 0, sum all-reduce of tensors and of numbers).
#pragma once

#include <torch/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "ipj/dist/environment.hpp"

namespace c10d {
class ProcessGroup;
class Work;
class Store;
}  // namespace c10d

namespace ipj::dist {

enum class Backend { gloo, nccl };
// "gloo" | "nccl" | "auto" (nccl for CUDA devices, else gloo); throws ipj::Error(usage) naming
// --dist-backend.
Backend parse_backend(const std::string& text, bool cuda_device);
std::string backend_name(Backend backend);

class ProcessGroupContext {
 public:
  // Rendezvous and process-group creation; throws ipj::Error(runtime) naming the address, the world size and
  // the timeout when the peers do not all arrive in time, ipj::Error(unsupported) for NCCL on a CPU build.
  // cuda_index: this rank's GPU for NCCL's scalar collectives (-1: LOCAL_RANK).
  ProcessGroupContext(const DistributedEnvironment& environment, Backend backend,
                      std::chrono::milliseconds timeout, int cuda_index = -1);
  ~ProcessGroupContext();
  ProcessGroupContext(const ProcessGroupContext&) = delete;
  ProcessGroupContext& operator=(const ProcessGroupContext&) = delete;

  const DistributedEnvironment& environment() const { return environment_; }
  int rank() const { return environment_.rank; }
  int world_size() const { return environment_.world_size; }
  Backend backend() const { return backend_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  const c10::intrusive_ptr<c10d::ProcessGroup>& group() const { return group_; }

  // Every rank's tensors become rank 0's (in place).
  void broadcast_from_primary(std::vector<torch::Tensor>& tensors);
  // Element-wise sum over ranks, in place.
  void all_reduce_sum(std::vector<torch::Tensor>& tensors);
  // Sum over ranks of a few numbers (metrics, joules); the same result on every rank.
  std::vector<double> all_reduce_sum(const std::vector<double>& values);
  void barrier();

 private:
  void wait(const std::string& what, const c10::intrusive_ptr<c10d::Work>& work);

  DistributedEnvironment environment_;
  Backend backend_;
  std::chrono::milliseconds timeout_;
  int cuda_index_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroup> group_;
};

}  // namespace ipj::dist
