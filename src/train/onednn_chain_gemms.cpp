// The linear-chain step's GEMMs on oneDNN's matmul primitives (see the header). Primitives and their
// memory objects are cached per (kind, layer, rows); each call only points the memory objects at the buffers.
#include "onednn_chain_gemms.hpp"

#ifdef IPJ_WITH_ONEDNN

#include <oneapi/dnnl/dnnl.hpp>

#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "ipj/core/log.hpp"

namespace ipj::train {
namespace {

using DataType = dnnl::memory::data_type;
using Tag = dnnl::memory::format_tag;

enum class GemmKind { forward, weight_grad, input_grad };

dnnl::memory::desc matrix(std::int64_t rows, std::int64_t cols, DataType type, Tag layout) {
  return dnnl::memory::desc({rows, cols}, type, layout);  // ab: row-major [rows, cols]; ba: its transpose
}

struct Gemm {
  dnnl::matmul primitive;
  dnnl::memory source, weights, destination, bias;  // bias: forward only
};

class OnednnGemms : public OnednnChainGemms {
 public:
  OnednnGemms(DataType element, std::string implementation)
      : element_(element),
        implementation_(std::move(implementation)),
        engine_(dnnl::engine::kind::cpu, 0),
        stream_(engine_) {}

  const std::string& implementation() const override { return implementation_; }

  void forward(Layer layer, std::int64_t rows, const void* input, const void* weight, const float* bias,
               void* output, bool relu, bool fp32_output) override {
    Gemm& gemm = cached(GemmKind::forward, layer, rows, [&] {
      const auto source = matrix(rows, layer.in, element_, Tag::ab);        // [rows, in]
      const auto weights = matrix(layer.in, layer.out, element_, Tag::ba);  // W^T of W [out, in]
      const auto destination =
          matrix(rows, layer.out, fp32_output ? DataType::f32 : element_, Tag::ab);  // [rows, out]
      const auto bias_desc = matrix(1, layer.out, DataType::f32, Tag::ab);           // [1, out]
      dnnl::post_ops post_ops;
      if (relu) post_ops.append_eltwise(1.0F, dnnl::algorithm::eltwise_relu, 0.0F, 0.0F);
      dnnl::primitive_attr attributes;
      attributes.set_post_ops(post_ops);
      const dnnl::matmul::primitive_desc description(
          dnnl::matmul::desc(source, weights, bias_desc, destination), attributes, engine_);
      return Gemm{dnnl::matmul(description), memory(source), memory(weights), memory(destination),
                  memory(bias_desc)};
    });
    run(gemm, input, weight, output, bias);
  }

  void weight_grad(Layer layer, std::int64_t rows, const void* output_grad, const void* input,
                   float* weight_grad) override {
    Gemm& gemm = cached(GemmKind::weight_grad, layer, rows, [&] {
      const auto source = matrix(layer.out, rows, element_, Tag::ba);                // grad^T of [rows, out]
      const auto weights = matrix(rows, layer.in, element_, Tag::ab);                // [rows, in]
      const auto destination = matrix(layer.out, layer.in, DataType::f32, Tag::ab);  // [out, in]
      const dnnl::matmul::primitive_desc description(dnnl::matmul::desc(source, weights, destination),
                                                     engine_);
      return Gemm{dnnl::matmul(description), memory(source), memory(weights), memory(destination), {}};
    });
    run(gemm, output_grad, input, weight_grad, nullptr);
  }

  void input_grad(Layer layer, std::int64_t rows, const void* output_grad, const void* weight,
                  void* input_grad) override {
    Gemm& gemm = cached(GemmKind::input_grad, layer, rows, [&] {
      const auto source = matrix(rows, layer.out, element_, Tag::ab);       // [rows, out]
      const auto weights = matrix(layer.out, layer.in, element_, Tag::ab);  // [out, in]
      const auto destination = matrix(rows, layer.in, element_, Tag::ab);   // [rows, in]
      const dnnl::matmul::primitive_desc description(dnnl::matmul::desc(source, weights, destination),
                                                     engine_);
      return Gemm{dnnl::matmul(description), memory(source), memory(weights), memory(destination), {}};
    });
    run(gemm, output_grad, weight, input_grad, nullptr);
  }

 private:
  dnnl::memory memory(const dnnl::memory::desc& description) {
    return dnnl::memory(description, engine_, DNNL_MEMORY_NONE);  // pointed at a buffer per call
  }

  template <typename Make>
  Gemm& cached(GemmKind kind, Layer layer, std::int64_t rows, Make make) {
    const auto key = std::make_tuple(kind, layer.index, rows);
    auto found = gemms_.find(key);
    if (found == gemms_.end()) found = gemms_.emplace(key, make()).first;
    return found->second;
  }

  void run(Gemm& gemm, const void* source, const void* weights, void* destination, const float* bias) {
    gemm.source.set_data_handle(const_cast<void*>(source));
    gemm.weights.set_data_handle(const_cast<void*>(weights));
    gemm.destination.set_data_handle(destination);
    std::unordered_map<int, dnnl::memory> arguments{
        {DNNL_ARG_SRC, gemm.source}, {DNNL_ARG_WEIGHTS, gemm.weights}, {DNNL_ARG_DST, gemm.destination}};
    if (bias != nullptr) {
      gemm.bias.set_data_handle(const_cast<float*>(bias));
      arguments.emplace(DNNL_ARG_BIAS, gemm.bias);
    }
    gemm.primitive.execute(stream_, arguments);
    stream_.wait();
  }

  DataType element_;  // inputs, weights, activations
  std::string implementation_;
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::map<std::tuple<GemmKind, std::size_t, std::int64_t>, Gemm> gemms_;
};

}  // namespace

std::unique_ptr<OnednnChainGemms> OnednnChainGemms::create(Element element) {
  const DataType type = element == Element::bf16 ? DataType::bf16 : DataType::f32;
  const char* name = element == Element::bf16 ? "bf16" : "fp32";
  try {
    // A matmul this CPU runs natively: oneDNN refuses bf16 on AVX2 CPUs; its reference kernels ("ref:...")
    // would be slower than ATen's.
    const auto probe = matrix(16, 16, type, Tag::ab);
    const dnnl::matmul::primitive_desc description(dnnl::matmul::desc(probe, probe, probe),
                                                   dnnl::engine(dnnl::engine::kind::cpu, 0));
    const std::string implementation = description.impl_info_str();
    if (implementation.rfind("ref", 0) == 0) {
      spdlog::debug("linear-chain step: oneDNN's {} matmul is its reference ({}); ATen's GEMMs instead", name,
                    implementation);
      return nullptr;
    }
    return std::make_unique<OnednnGemms>(type, implementation);
  } catch (const dnnl::error& error) {
    spdlog::debug("linear-chain step: oneDNN has no {} matmul here ({}); ATen's GEMMs instead", name,
                  error.what());
    return nullptr;
  }
}

}  // namespace ipj::train

#else  // no oneDNN in this build

namespace ipj::train {
std::unique_ptr<OnednnChainGemms> OnednnChainGemms::create(Element) {
  return nullptr;
}
}  // namespace ipj::train

#endif
