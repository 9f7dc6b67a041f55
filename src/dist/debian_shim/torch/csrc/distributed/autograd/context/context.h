// Stand-in for a LibTorch header that Debian's libtorch-dev 1.13 does not ship but c10d/reducer.hpp includes.
// The Reducer only holds a shared_ptr to this class and checks its GradCallback type, so this declaration is
// enough to construct and use c10d::Reducer; ipj never creates or touches a DistAutogradContext (RPC
// distributed autograd). Used only where the real header is missing (src/CMakeLists.txt checks).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>

namespace torch {
namespace distributed {
namespace autograd {

class DistAutogradContext {
 public:
  using GradCallback = std::function<bool(at::Tensor&)>;
};
using ContextPtr = std::shared_ptr<DistAutogradContext>;

}  // namespace autograd
}  // namespace distributed
}  // namespace torch
