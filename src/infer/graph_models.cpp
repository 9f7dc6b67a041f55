// Graph IR behind the InferenceModel interface (see graph_models.hpp).
#include "graph_models.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <exception>
#include <memory>
#include <optional>

#include "ipj/core/error.hpp"
#include "ipj/core/log.hpp"
#include "ipj/core/number_format.hpp"
#include "ipj/data/dataset.hpp"
#include "ipj/infer/script_graph.hpp"
#include "ipj/infer/xnnpack_runtime.hpp"
#include "ipj/quant/quantized_graph.hpp"
#include "ipj/quant/source_model.hpp"
#include "ipj/train/precision.hpp"

namespace ipj::infer {
namespace {

// The float graph, interpreted node by node; bf16 runs under CPU autocast.
class FloatGraphModel : public InferenceModel {
 public:
  FloatGraphModel(quant::Graph graph, std::string precision)
      : graph_(std::move(graph)), precision_(std::move(precision)) {}
  torch::Tensor forward(const torch::Tensor& input) const override {
    torch::NoGradGuard no_grad;
    train::AutocastRegion autocast(precision_, false);
    return quant::run_graph(graph_, input).to(torch::kFloat);
  }

 private:
  quant::Graph graph_;
  std::string precision_;
};

class Int8GraphModel : public InferenceModel {
 public:
  explicit Int8GraphModel(quant::QuantizedGraph graph) : graph_(std::move(graph)) {}
  torch::Tensor forward(const torch::Tensor& input) const override { return graph_.forward(input); }
  const quant::QuantizedGraph& graph() const { return graph_; }

 private:
  quant::QuantizedGraph graph_;
};

std::vector<quant::QuantParams> calibration_params(const quant::Graph& graph, const std::string& data_dir,
                                                   const data::DataOptions& data_options,
                                                   const LoadOptions& options) {
  const CalibrationImages calibration =
      load_calibration_images(options.calibration, data_dir, data_options, graph.input_shape);
  return quant::calibrate_graph(graph, calibration.images, options.calibration.samples, 256,
                                quant::ObserverKind::minmax, 100.0);
}

}  // namespace

std::shared_ptr<InferenceModel> script_graph_model(const quant::Graph& graph, Freezing freezing) {
  return std::make_shared<ScriptModel>(script_graph(graph, freezing), std::vector<float>{},
                                       std::vector<float>{}, "fp32", std::vector<std::int64_t>{});
}

std::shared_ptr<InferenceModel> graph_variant(quant::Graph graph, Variant variant,
                                              const std::string& data_dir,
                                              const data::DataOptions& data_options,
                                              const LoadOptions& options) {
  if (variant == Variant::fp32 || variant == Variant::bf16 || variant == Variant::jit) {
    const std::int64_t bytes = quant::graph_float_parameter_bytes(graph);
    const GraphBuilder build_graph = [&graph, bytes](Freezing freezing) {  // fp32's frozen/xnnpack, jit
      std::shared_ptr<InferenceModel> model = script_graph_model(graph, freezing);
      model->parameter_bytes = bytes;
      return model;
    };
    const std::vector<std::int64_t> sample_shape = graph.input_shape;
    std::shared_ptr<InferenceModel> result = std::make_shared<FloatGraphModel>(
        graph, choice_name(variant == Variant::bf16 ? variant : Variant::fp32));  // the graph interpreted
    if (variant == Variant::fp32)
      result = fp32_engine_model(result, build_graph, sample_shape, options.run, [&graph] { return graph; });
    if (variant == Variant::jit) result = jit_model(result, build_graph, sample_shape, options.run);
    result->parameter_bytes = bytes;
    return result;
  }
  quant::QuantMode mode = quant::QuantMode::dynamic;
  std::vector<quant::QuantParams> params;
  if (variant == Variant::int8_static) {
    mode = quant::QuantMode::static_ptq;
    params = calibration_params(graph, data_dir, data_options, options);
  } else if (variant != Variant::int8_dynamic) {
    fail(ErrorCategory::unsupported, "variant '" + choice_name(variant) + "' is not available for " +
                                         graph.model_name +
                                         " (graph models run fp32, bf16, jit, int8-dynamic, int8-static; "
                                         "int8-qat: bench the file `ipj quantize "
                                         "--mode qat` writes)");
  }
  auto result = std::make_shared<Int8GraphModel>(
      quant::QuantizedGraph::convert(graph, mode, params, options.run.engine));
  result->parameter_bytes = result->graph().parameter_bytes();
  return result;
}

std::vector<std::int64_t> batch_shape(std::int64_t batch, const std::vector<std::int64_t>& sample_shape) {
  std::vector<std::int64_t> shape{batch};
  shape.insert(shape.end(), sample_shape.begin(), sample_shape.end());
  return shape;
}

Batch1Candidate xnnpack_int8_graph_candidate(const InferenceModel& model, const RunOptions& run) {
  const auto* int8 = dynamic_cast<const Int8GraphModel*>(&model);
  if (!int8 || run.engine != "auto" || int8->graph().mode() == quant::QuantMode::dynamic ||
      !xnnpack_runtime_available())
    return {};
  Batch1Candidate candidate;
  candidate.build = [graph = int8->graph()](InferenceModelPtr busy, std::int64_t batch, int threads) {
    return xnnpack_int8_graph_runtime_model(graph, batch, std::move(busy), threads);
  };
  const std::vector<std::int64_t> shape = batch_shape(1, model.sample_shape);
  candidate.disagreement = [graph = int8->graph(), shape](const Forward& libtorch, const Forward& xnnpack) {
    torch::NoGradGuard no_grad;
    const quant::Graph float_graph = graph.dequantized_graph();  // only once the runtime was built
    // the same 16 pixel inputs on every load (a fixed seed, not the process's generator): the verdict
    // should not change between loads of one model
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(20261205);
    std::vector<std::int64_t> batch = shape;
    batch[0] = 16;
    const torch::Tensor inputs = torch::rand(batch, generator);     // [16, ...sample] in [0, 1)
    double libtorch_error = 0.0, xnnpack_error = 0.0, scale = 1.0;  // mean |difference| per logit
    for (std::int64_t row = 0; row < 16; ++row) {
      const torch::Tensor input = inputs.narrow(0, row, 1);
      const torch::Tensor reference = quant::run_graph(float_graph, input).to(torch::kFloat);
      scale = std::max(scale, reference.abs().max().item<double>());
      libtorch_error += (libtorch(input) - reference).abs().mean().item<double>() / 16.0;
      xnnpack_error += (xnnpack(input) - reference).abs().mean().item<double>() / 16.0;
    }
    spdlog::debug(
        "XNNPACK int8 check: {:.4g} per logit off the dequantized float graph vs {:.4g} for LibTorch's",
        xnnpack_error, libtorch_error);
    if (xnnpack_error <= 1.25 * libtorch_error + 1e-4 * scale) return std::string();
    return "off the dequantized float graph by " + format_number("%.4g", xnnpack_error) + " per logit vs " +
           format_number("%.4g", libtorch_error) + " for LibTorch's int8 kernels";
  };
  return candidate;
}

std::shared_ptr<InferenceModel> int8_graph_model(const std::string& path, const LoadOptions& options) {
  auto result = std::make_shared<Int8GraphModel>(quant::QuantizedGraph::load(path, options.run.engine));
  const quant::QuantizedGraph& loaded = result->graph();
  const Variant stored = stored_int8_variant(quant::quant_mode_name(loaded.mode()), "'" + path + "'");
  require_stored_variant(options.run.variant, stored, path);
  result->variant = stored;
  result->format = ModelFormat::ipj_int8;
  result->path = path;
  result->model_name = loaded.graph().model_name;
  result->sample_shape = loaded.graph().input_shape;
  result->parameter_bytes = loaded.parameter_bytes();
  result->data_dir = loaded.extra().value("data_dir", std::string());
  return result;
}

GraphIrSource built_once(GraphIrSource source) {
  if (!source) return source;
  auto graph = std::make_shared<std::optional<quant::Graph>>();
  auto failure = std::make_shared<std::exception_ptr>();
  return [source = std::move(source), graph, failure]() -> quant::Graph {
    if (*failure) std::rethrow_exception(*failure);
    if (!*graph) {
      try {
        *graph = source();
      } catch (...) {  // rethrown to this caller and to every later one
        *failure = std::current_exception();
        throw;
      }
    }
    return **graph;
  };
}

std::string cause_once(const std::string& reason, const std::string& cause) {
  return reason.find(cause) == std::string::npos ? cause : "the same as above";
}

}  // namespace ipj::infer
