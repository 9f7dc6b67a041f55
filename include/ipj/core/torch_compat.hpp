// The one place where LibTorch version differences live (Debian's 1.13 vs 2.x). Header-only; include it
// only from LibTorch-using translation units. Anything version-dependent goes here, nowhere else.
#pragma once

#include <ATen/autocast_mode.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

// LibTorch's thread-local switch that makes XNNPACK (and QNNPACK) run on the calling thread instead of its
// pthreadpool, whose idle workers spin for milliseconds after each call. libtorch_cpu exports it in 1.13 and
// 2.x (caffe2/utils/threadpool/thread_pool_guard.h); LibTorch's own archives ship that header, Debian's
// libtorch-dev does not, so it is declared here as that header declares it.
#if __has_include(<caffe2/utils/threadpool/thread_pool_guard.h>)
#include <caffe2/utils/threadpool/thread_pool_guard.h>
#else
namespace caffe2 {
struct _NoPThreadPoolGuard {
  static bool is_enabled();
  static void set_enabled(bool enabled);
};
}  // namespace caffe2
#endif

namespace ipj::compat {

// While alive, XNNPACK operators called from this thread run on it alone (no pthreadpool workers).
class XnnpackOnCallingThread {
 public:
  XnnpackOnCallingThread() : previous_(caffe2::_NoPThreadPoolGuard::is_enabled()) {
    caffe2::_NoPThreadPoolGuard::set_enabled(true);
  }
  ~XnnpackOnCallingThread() { caffe2::_NoPThreadPoolGuard::set_enabled(previous_); }
  XnnpackOnCallingThread(const XnnpackOnCallingThread&) = delete;
  XnnpackOnCallingThread& operator=(const XnnpackOnCallingThread&) = delete;

 private:
  bool previous_ = false;
};

inline constexpr bool kTorchAtLeast_2_4 =
    (TORCH_VERSION_MAJOR > 2) || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4);

inline std::string torch_version() {
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
         std::to_string(TORCH_VERSION_PATCH);
}

// Autocast on CPU (bf16). LibTorch >= 2.4 takes a device type; older releases have per-device names.
inline void set_cpu_autocast(bool enabled, at::ScalarType dtype) {
#if (TORCH_VERSION_MAJOR > 2) || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  at::autocast::set_autocast_dtype(at::kCPU, dtype);
  at::autocast::set_autocast_enabled(at::kCPU, enabled);
#else
  at::autocast::set_autocast_cpu_dtype(dtype);
  at::autocast::set_cpu_enabled(enabled);
#endif
}

inline bool cpu_autocast_enabled() {
#if (TORCH_VERSION_MAJOR > 2) || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  return at::autocast::is_autocast_enabled(at::kCPU);
#else
  return at::autocast::is_cpu_enabled();
#endif
}

// Autocast on CUDA (fp16 or bf16).
inline void set_cuda_autocast(bool enabled, at::ScalarType dtype) {
#if (TORCH_VERSION_MAJOR > 2) || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  at::autocast::set_autocast_dtype(at::kCUDA, dtype);
  at::autocast::set_autocast_enabled(at::kCUDA, enabled);
#else
  at::autocast::set_autocast_gpu_dtype(dtype);
  at::autocast::set_enabled(enabled);
#endif
}

inline bool cuda_autocast_enabled() {
#if (TORCH_VERSION_MAJOR > 2) || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  return at::autocast::is_autocast_enabled(at::kCUDA);
#else
  return at::autocast::is_enabled();
#endif
}

// Drops the casted-weight cache autocast keeps while enabled (PyTorch does this when an autocast region
// exits).
inline void clear_autocast_cache() {
  at::autocast::clear_cache();
}

// The key torch::optim keeps a parameter's state under: a string of the TensorImpl address in 1.13, the
// address itself in 2.x. Deduced from the optimizer's own map type, so both spellings compile.
template <typename Optimizer, typename TensorType>
auto optimizer_state_key(Optimizer& optimizer, const TensorType& parameter) {
  using Key = typename std::decay_t<decltype(optimizer.state())>::key_type;
  void* address = parameter.unsafeGetTensorImpl();
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream text;  // what c10::guts::to_string(TensorImpl*) writes
    text << address;
    return text.str();
  } else {
    return static_cast<Key>(address);
  }
}

// A c10d process group over one backend (Gloo or NCCL). In 1.13 the backend *is* the process group. From 2.0
// a ProcessGroup holds one backend per device type: 2.0 - 2.5 make it with ProcessGroup::Options, whose
// backend name sets the default backend (there is no setDefaultBackend before 2.6); later releases make it
// without Options and set the default backend by call. Gloo serves CPU and CUDA tensors, as 1.13's
// ProcessGroupGloo did and as init_process_group("gloo") registers it; NCCL serves CUDA tensors. Templated on
// ipj's call site types so that this header needs no c10d include.
template <typename Group, typename Store, typename BackendPtr>
c10::intrusive_ptr<Group> process_group_over(BackendPtr backend, const c10::intrusive_ptr<Store>& store,
                                             int rank, int size, bool nccl) {
  using BackendType = typename BackendPtr::element_type;
  if constexpr (std::is_base_of_v<Group, BackendType>) {
    return backend;
  } else {
    const auto type = nccl ? Group::BackendType::NCCL : Group::BackendType::GLOO;
    c10::intrusive_ptr<Group> group;
    if constexpr (std::is_constructible_v<Group, c10::intrusive_ptr<Store>, int, int>) {
      group = c10::make_intrusive<Group>(store, rank, size);
      group->setDefaultBackend(type);
    } else {
      group = c10::make_intrusive<Group>(
          store, rank, size, c10::make_intrusive<typename Group::Options>(nccl ? "nccl" : "gloo"));
    }
    if (!nccl) group->setBackend(c10::DeviceType::CPU, type, backend);
    group->setBackend(c10::DeviceType::CUDA, type, backend);
    return group;
  }
}

// c10d::Reducer as DistributedDataParallel builds it. 1.13 and 2.x through at least 2.5 take the per-bucket
// size limits third; 2025 releases add two flags (skip_all_reduce_unused_params, use_python_reducer) after
// first_bucket_bytes_cap and drop the limits, which the newest take back last (as int64_t).
template <typename Reducer, typename GroupPtr>
std::unique_ptr<Reducer> make_reducer(std::vector<at::Tensor> parameters,
                                      std::vector<std::vector<std::size_t>> bucket_indices,
                                      std::vector<std::size_t> bucket_limits, const GroupPtr& group,
                                      std::int64_t bucket_bytes, std::int64_t first_bucket_bytes) {
  const std::size_t count = parameters.size();
  using Names = std::unordered_map<std::size_t, std::string>;
  using Tensors = std::vector<at::Tensor>;
  using Buckets = std::vector<std::vector<std::size_t>>;
  using Flags = std::vector<bool>;
  if constexpr (std::is_constructible_v<Reducer, Tensors, Buckets, std::vector<std::size_t>, GroupPtr, Flags,
                                        std::int64_t, bool, bool, Names, std::int64_t>) {
    return std::make_unique<Reducer>(
        std::move(parameters), std::move(bucket_indices), std::move(bucket_limits), group,
        std::vector<bool>(count, false), bucket_bytes,
        /*find_unused_parameters=*/false, /*gradient_as_bucket_view=*/false, Names(), first_bucket_bytes);
  } else if constexpr (std::is_constructible_v<Reducer, Tensors, Buckets, GroupPtr, Flags, std::int64_t, bool,
                                               bool, Names, std::int64_t, bool, bool,
                                               std::vector<std::int64_t>>) {
    return std::make_unique<Reducer>(std::move(parameters), std::move(bucket_indices), group,
                                     std::vector<bool>(count, false), bucket_bytes,
                                     /*find_unused_parameters=*/false, /*gradient_as_bucket_view=*/false,
                                     Names(), first_bucket_bytes, /*skip_all_reduce_unused_params=*/false,
                                     /*use_python_reducer=*/false,
                                     std::vector<std::int64_t>(bucket_limits.begin(), bucket_limits.end()));
  } else {
    return std::make_unique<Reducer>(std::move(parameters), std::move(bucket_indices), group,
                                     std::vector<bool>(count, false), bucket_bytes,
                                     /*find_unused_parameters=*/false, /*gradient_as_bucket_view=*/false,
                                     Names(), first_bucket_bytes, /*skip_all_reduce_unused_params=*/false,
                                     /*use_python_reducer=*/false);
  }
}

// The calling thread's LibTorch warning handler (c10::Warning:: in 1.13, c10::WarningUtils:: in 2.x).
inline c10::WarningHandler* get_warning_handler() {
#if TORCH_VERSION_MAJOR >= 2
  return c10::WarningUtils::get_warning_handler();
#else
  return c10::Warning::get_warning_handler();
#endif
}

inline void set_warning_handler(c10::WarningHandler* handler) {
#if TORCH_VERSION_MAJOR >= 2
  c10::WarningUtils::set_warning_handler(handler);
#else
  c10::Warning::set_warning_handler(handler);
#endif
}

// A LibTorch warning handler that passes each warning's source location and text to `handle`: 1.13 calls
// process(location, message, verbatim), 2.x process(const c10::Warning&).
class WarningHandlerBase : public c10::WarningHandler {
 public:
#if TORCH_VERSION_MAJOR >= 2
  void process(const c10::Warning& warning) override {
    handle(warning.source_location(), warning.msg());
  }
#else
  void process(const c10::SourceLocation& location, const std::string& message, const bool) override {
    handle(location, message);
  }
#endif

 protected:
  virtual void handle(const c10::SourceLocation& location, const std::string& message) = 0;
};

}  // namespace ipj::compat
