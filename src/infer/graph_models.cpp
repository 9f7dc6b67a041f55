// Graph IR behind the InferenceModel interface (see graph_models.hpp).
#include "graph_models.hpp"

#include <torch/torch.h>

#include "ipj/core/error.hpp"
#include "ipj/data/dataset.hpp"
#include "ipj/infer/script_graph.hpp"
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

}  // namespace ipj::infer
