// int8 graph files: the graph metadata (graph_file.hpp) plus mode, engine and per-node output parameters in
// JSON; int8 weights, their scales, the float weights that stay float and biases as archive entries.
#include <torch/serialize.h>
#include <torch/torch.h>

#include "archive_io.hpp"
#include "ipj/core/atomic_file.hpp"
#include "ipj/core/checked_file.hpp"
#include "ipj/core/error.hpp"
#include "ipj/quant/graph_file.hpp"
#include "ipj/quant/quantized_graph.hpp"
#include "ipj/quant/source_model.hpp"

namespace ipj::quant {

void QuantizedGraph::save(const std::string& path, const Json& extra) const {
  Json meta = graph_metadata(graph_);
  meta["mode"] = quant_mode_name(mode_);
  meta["engine"] = engine_;
  meta["output_params"] = Json::array();
  for (const QuantParams& params : params_)
    meta["output_params"].push_back({params.scale, params.zero_point});
  meta["extra"] = extra;
  torch::serialize::OutputArchive archive;
  archive.write("ipj_int8_graph_format", c10::IValue(static_cast<std::int64_t>(kInt8GraphFormatVersion)));
  archive.write("meta_json", c10::IValue(meta.dump()));
  for (std::size_t index = 0; index < graph_.nodes.size(); ++index) {
    const std::string prefix = "node" + std::to_string(index) + ".";
    const GraphNode& node = graph_.nodes[index];
    if (weight_int8_[index].defined()) {
      archive.write(prefix + "weight_int8", weight_int8_[index]);
      archive.write(prefix + "weight_scale", weight_scale_[index]);
    }
    if (node.weight.defined()) archive.write(prefix + "weight", node.weight);
    if (node.bias.defined()) archive.write(prefix + "bias", node.bias);
  }
  save_sealed_archive(archive, path);
}

bool QuantizedGraph::is_int8_graph_file(const std::string& path) {
  try {
    return detect_model_file(path) == ModelFileFormat::int8_graph;
  } catch (const std::exception&) {  // any damage: "not this format"; its loader says why
    return false;
  }
}

QuantizedGraph QuantizedGraph::load(const std::string& path, const std::string& engine) try {
  OpenedArchive opened =
      open_ipj_archive(path, "ipj_int8_graph_format", kInt8GraphFormatVersion, "int8 graph file");
  torch::serialize::InputArchive& archive = opened.archive;
  const Json& meta = opened.meta;
  QuantizedGraph result;
  try {
    result.graph_ = graph_from_metadata(meta, path);
    result.mode_ = parse_quant_mode(meta.at("mode").get<std::string>());
    result.engine_ =
        select_quantized_engine(engine == "auto" ? meta.at("engine").get<std::string>() : engine);
    result.extra_ = meta.value("extra", Json::object());
    for (const Json& entry : meta.at("output_params"))
      result.params_.push_back({entry.at(0).get<double>(), entry.at(1).get<std::int64_t>()});
    const std::size_t count = result.graph_.nodes.size();
    if (result.params_.size() != count)
      fail(ErrorCategory::invalid_input, "'" + path + "': damaged output_params");
    result.weight_int8_.resize(count);
    result.weight_scale_.resize(count);
    for (std::size_t index = 0; index < count; ++index) {
      const std::string prefix = "node" + std::to_string(index) + ".";
      GraphNode& node = result.graph_.nodes[index];
      // Each read needs its own undefined tensor: reading into a defined one calls set_() on it (aliasing).
      torch::Tensor weight_int8, weight_scale, weight, bias;
      if (archive.try_read(prefix + "weight_int8", weight_int8)) {
        archive.read(prefix + "weight_scale", weight_scale);
        result.weight_int8_[index] = weight_int8;
        result.weight_scale_[index] = weight_scale;
      }
      if (archive.try_read(prefix + "weight", weight)) node.weight = weight;
      if (archive.try_read(prefix + "bias", bias)) node.bias = bias;
      if (has_weights(node) && !node.weight.defined() && !weight_int8.defined())
        fail(ErrorCategory::invalid_input, "'" + path + "': node '" + node.name + "' has no weights");
    }
    validate_graph(result.graph_, path, false);
    result.pack();
  } catch (const Json::exception& error) {
    fail(ErrorCategory::invalid_input, "'" + path + "': damaged int8 graph metadata: " + error.what());
  } catch (const c10::Error& error) {
    fail(ErrorCategory::invalid_input,
         "'" + path + "': damaged int8 graph: " + error.what_without_backtrace());
  }
  return result;
} catch (...) {
  rethrow_as_load_error(path, "ipj int8 graph file");
}

}  // namespace ipj::quant
