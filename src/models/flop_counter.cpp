// RecordFunction-based FLOP counter (thread-local callback; counts at the dispatcher level, so nested
// operator calls such as linear -> addmm are counted once).
#include "ipj/models/flop_counter.hpp"

#include <ATen/core/ivalue.h>
#include <ATen/record_function.h>

#include <cstring>

namespace ipj::models {
namespace {

thread_local std::int64_t* active_counter = nullptr;

std::int64_t flops_of(const at::RecordFunction& call) {
  const char* name = call.name();
  const auto inputs = call.inputs();
  auto tensor_at = [&](size_t index) -> const at::Tensor* {
    return index < inputs.size() && inputs[index].isTensor() ? &inputs[index].toTensor() : nullptr;
  };
  if (std::strcmp(name, "aten::addmm") == 0) {  // (bias, a [M, K], b [K, N])
    const at::Tensor* a = tensor_at(1);
    const at::Tensor* b = tensor_at(2);
    if (a && b && a->dim() == 2 && b->dim() == 2) return 2 * a->size(0) * a->size(1) * b->size(1);
  } else if (std::strcmp(name, "aten::mm") == 0) {  // (a [M, K], b [K, N])
    const at::Tensor* a = tensor_at(0);
    const at::Tensor* b = tensor_at(1);
    if (a && b && a->dim() == 2 && b->dim() == 2) return 2 * a->size(0) * a->size(1) * b->size(1);
  } else if (std::strcmp(name, "aten::bmm") == 0) {  // (a [G, M, K], b [G, K, N])
    const at::Tensor* a = tensor_at(0);
    const at::Tensor* b = tensor_at(1);
    if (a && b && a->dim() == 3 && b->dim() == 3)
      return 2 * a->size(0) * a->size(1) * a->size(2) * b->size(2);
  } else if (std::strcmp(name, "aten::convolution") == 0) {
    // (input [B, Cin, *spatial], weight [Cout, Cin/groups, *kernel], bias, stride, padding, dilation,
    // transposed, ...)
    const at::Tensor* input = tensor_at(0);
    const at::Tensor* weight = tensor_at(1);
    if (!input || !weight || inputs.size() < 7) return 0;
    const auto stride = inputs[3].toIntVector();
    const auto padding = inputs[4].toIntVector();
    const auto dilation = inputs[5].toIntVector();
    const bool transposed = inputs[6].toBool();
    const std::int64_t spatial_dims = weight->dim() - 2;
    // Each weight element is used once per output position (per input position when transposed).
    std::int64_t positions = input->size(0);
    for (std::int64_t d = 0; d < spatial_dims; ++d) {
      const std::int64_t in = input->size(2 + d), kernel = weight->size(2 + d);
      const std::int64_t s = stride[d % stride.size()], p = padding[d % padding.size()],
                         dl = dilation[d % dilation.size()];
      positions *= transposed ? in : (in + 2 * p - dl * (kernel - 1) - 1) / s + 1;
    }
    return 2 * positions * weight->numel();
  }
  return 0;
}

std::unique_ptr<at::ObserverContext> on_operator_start(const at::RecordFunction& call) {
  if (active_counter != nullptr) *active_counter += flops_of(call);
  return nullptr;
}

}  // namespace

std::int64_t count_flops(const std::function<void()>& work) {
  std::int64_t total = 0;
  std::int64_t* previous = active_counter;
  active_counter = &total;
  const at::CallbackHandle handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(on_operator_start).needsInputs(true).scopes({at::RecordScope::FUNCTION}));
  try {
    work();
  } catch (...) {
    at::removeCallback(handle);
    active_counter = previous;
    throw;
  }
  at::removeCallback(handle);
  active_counter = previous;
  return total;
}

}  // namespace ipj::models
