// TCPStore rendezvous + ProcessGroupGloo/NCCL creation with timeouts, and the trainer's collectives. c10d
// errors (a timeout, a peer that closed its connection) become ipj::Error(runtime) naming the job's address.
#include "ipj/dist/process_group.hpp"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef IPJ_WITH_CUDA
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <cstdlib>

#include "ipj/core/error.hpp"
#include "ipj/core/torch_compat.hpp"

namespace ipj::dist {
namespace {

std::string address_of(const DistributedEnvironment& environment) {
  return environment.master_addr + ":" + std::to_string(environment.master_port);
}

std::string first_line(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

bool is_loopback(const std::string& address) {
  return address == "localhost" || address.rfind("127.", 0) == 0 || address == "::1";
}

// Gloo's transport device: GLOO_SOCKET_IFNAME when set (as in PyTorch), loopback for single-machine jobs on a
// loopback master address, else the address this host's name resolves to.
std::shared_ptr<::gloo::transport::Device> gloo_device(const DistributedEnvironment& environment) {
  if (const char* interface = std::getenv("GLOO_SOCKET_IFNAME"); interface != nullptr && *interface != '\0')
    return c10d::ProcessGroupGloo::createDeviceForInterface(interface);
  if (is_loopback(environment.master_addr))
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

c10::intrusive_ptr<c10d::ProcessGroup> create_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                    const DistributedEnvironment& environment,
                                                    Backend backend, std::chrono::milliseconds timeout) {
  if (backend == Backend::nccl) {
#ifdef IPJ_WITH_CUDA
    auto options = c10d::ProcessGroupNCCL::Options::create();
    options->timeout = timeout;
    return compat::process_group_over<c10d::ProcessGroup>(
        c10::make_intrusive<c10d::ProcessGroupNCCL>(store, environment.rank, environment.world_size, options),
        store, environment.rank, environment.world_size, /*nccl=*/true);
#else
    fail(ErrorCategory::unsupported,
         "--dist-backend nccl needs a CUDA build (-DIPJ_WITH_CUDA=ON against a CUDA LibTorch); use gloo on "
         "CPUs");
#endif
  }
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(gloo_device(environment));
  return compat::process_group_over<c10d::ProcessGroup>(
      c10::make_intrusive<c10d::ProcessGroupGloo>(store, environment.rank, environment.world_size, options),
      store, environment.rank, environment.world_size, /*nccl=*/false);
}

}  // namespace

Backend parse_backend(const std::string& text, bool cuda_device) {
  if (text == "gloo") return Backend::gloo;
  if (text == "nccl") return Backend::nccl;
  if (text == "auto") return cuda_device ? Backend::nccl : Backend::gloo;
  fail(ErrorCategory::usage, "--dist-backend '" + text + "' is not one of gloo, nccl, auto");
}

std::string backend_name(Backend backend) {
  return backend == Backend::nccl ? "nccl" : "gloo";
}

ProcessGroupContext::ProcessGroupContext(const DistributedEnvironment& environment, Backend backend,
                                         std::chrono::milliseconds timeout, int cuda_index)
    : environment_(environment),
      backend_(backend),
      timeout_(timeout),
      cuda_index_(cuda_index >= 0 ? cuda_index : environment.local_rank) {
  const std::string where = address_of(environment);
  const std::string seconds = std::to_string(timeout.count() / 1000);
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<std::uint16_t>(environment.master_port);
    store_options.isServer = environment.is_primary() && !environment.agent_store;
    store_options.numWorkers = static_cast<std::size_t>(environment.world_size);
    store_options.waitWorkers = true;
    store_options.timeout = timeout;
    auto tcp_store = c10::make_intrusive<c10d::TCPStore>(environment.master_addr, store_options);
    store_ = c10::make_intrusive<c10d::PrefixStore>("ipj/default_pg", tcp_store);
    group_ = create_group(store_, environment, backend, timeout);
  } catch (const ipj::Error&) {
    throw;
  } catch (const std::exception& error) {
    fail(ErrorCategory::runtime,
         "--distributed: rank " + std::to_string(environment.rank) + " could not join the job at " + where +
             " (WORLD_SIZE=" + std::to_string(environment.world_size) + ") within " + seconds +
             " s: " + first_line(error.what()) +
             ". Check that every rank was started with the same MASTER_ADDR/MASTER_PORT and WORLD_SIZE, that "
             "rank 0 is running and the port is reachable; raise --dist-timeout-s for slow starts");
  }
}

ProcessGroupContext::~ProcessGroupContext() = default;

void ProcessGroupContext::wait(const std::string& what, const c10::intrusive_ptr<c10d::Work>& work) {
  try {
    work->wait(timeout_);
  } catch (const std::exception& error) {
    fail(ErrorCategory::runtime, "--distributed: " + what + " on rank " + std::to_string(rank()) +
                                     " failed (job " + address_of(environment_) +
                                     "): " + first_line(error.what()) +
                                     ". Another rank probably stopped; see its output");
  }
}

void ProcessGroupContext::broadcast_from_primary(std::vector<torch::Tensor>& tensors) {
  for (auto& tensor : tensors) {
    std::vector<torch::Tensor> one{tensor};
    c10d::BroadcastOptions options;
    options.rootRank = 0;
    options.timeout = timeout_;
    wait("broadcast", group_->broadcast(one, options));
  }
}

void ProcessGroupContext::all_reduce_sum(std::vector<torch::Tensor>& tensors) {
  for (auto& tensor : tensors) {
    std::vector<torch::Tensor> one{tensor};
    c10d::AllreduceOptions options;
    options.reduceOp = c10d::ReduceOp::SUM;
    options.timeout = timeout_;
    wait("all-reduce", group_->allreduce(one, options));
  }
}

std::vector<double> ProcessGroupContext::all_reduce_sum(const std::vector<double>& values) {
  // NCCL reduces device tensors only: the numbers travel on this rank's GPU.
  const torch::Device device =
      backend_ == Backend::nccl ? torch::Device(torch::kCUDA, cuda_index_) : torch::kCPU;
  std::vector<torch::Tensor> packed{
      torch::tensor(values, torch::TensorOptions(torch::kFloat64)).to(device)};  // [values.size()]
  all_reduce_sum(packed);
  const torch::Tensor summed = packed[0].to(torch::kCPU).contiguous();
  return std::vector<double>(summed.data_ptr<double>(), summed.data_ptr<double>() + summed.numel());
}

void ProcessGroupContext::barrier() {
  c10d::BarrierOptions options;
  options.timeout = timeout_;
  wait("barrier", group_->barrier(options));
}

}  // namespace ipj::dist
