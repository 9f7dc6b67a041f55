// Serialisation of graph IR: JSON metadata per node and one archive entry per weight and bias.
#include "ipj/quant/graph_file.hpp"

#include <torch/serialize.h>

#include <cmath>
#include <limits>

#include "archive_io.hpp"
#include "ipj/core/atomic_file.hpp"
#include "ipj/core/checked_file.hpp"
#include "ipj/core/error.hpp"
#include "ipj/quant/source_model.hpp"

namespace ipj::quant {
namespace {

Json bound(double value) {
  return std::isinf(value) ? Json(nullptr) : Json(value);
}
double unbound(const Json& value, double infinite) {
  return value.is_null() ? infinite : value.get<double>();
}

std::string activation_name(ActivationKind kind) {
  return kind == ActivationKind::relu ? "relu" : kind == ActivationKind::clamp ? "clamp" : "none";
}

Json node_metadata(const GraphNode& node) {
  Json entry = {{"kind", node_kind_name(node.kind)},
                {"name", node.name},
                {"inputs", node.inputs},
                {"activation", activation_name(node.activation.kind)},
                {"kernel", node.kernel},
                {"stride", node.stride},
                {"padding", node.padding},
                {"dilation", node.dilation},
                {"groups", node.groups},
                {"ceil_mode", node.ceil_mode},
                {"count_include_pad", node.count_include_pad},
                {"output_size", node.output_size}};
  if (node.activation.kind == ActivationKind::clamp) {
    entry["clamp_min"] = bound(node.activation.min);
    entry["clamp_max"] = bound(node.activation.max);
  }
  return entry;
}

GraphNode node_from_metadata(const Json& entry) {
  GraphNode node;
  node.kind = parse_node_kind(entry.at("kind").get<std::string>());
  node.name = entry.at("name").get<std::string>();
  node.inputs = entry.at("inputs").get<std::vector<std::size_t>>();
  const std::string activation = entry.at("activation").get<std::string>();
  if (activation == "relu") {
    node.activation.kind = ActivationKind::relu;
  } else if (activation == "clamp") {
    node.activation = {ActivationKind::clamp, unbound(entry.at("clamp_min"), -INFINITY),
                       unbound(entry.at("clamp_max"), INFINITY)};
  } else if (activation != "none") {
    fail(ErrorCategory::invalid_input, "unknown activation '" + activation + "'");
  }
  node.kernel = entry.at("kernel").get<Pair>();
  node.stride = entry.at("stride").get<Pair>();
  node.padding = entry.at("padding").get<Pair>();
  node.dilation = entry.at("dilation").get<Pair>();
  node.groups = entry.at("groups").get<std::int64_t>();
  node.ceil_mode = entry.at("ceil_mode").get<bool>();
  node.count_include_pad = entry.at("count_include_pad").get<bool>();
  node.output_size = entry.at("output_size").get<Pair>();
  return node;
}

}  // namespace

Json graph_metadata(const Graph& graph) {
  Json nodes = Json::array();
  for (const GraphNode& node : graph.nodes)
    nodes.push_back(node_metadata(node));
  return {{"model_name", graph.model_name},
          {"input_shape", graph.input_shape},
          {"num_classes", graph.num_classes},
          {"input_mean", graph.input_mean},
          {"input_std", graph.input_std},
          {"input_padding", graph.input_padding},
          {"input_pad_value", graph.input_pad_value},
          {"nodes", nodes}};
}

Graph graph_from_metadata(const Json& meta, const std::string& where) {
  Graph graph;
  try {
    graph.model_name = meta.at("model_name").get<std::string>();
    graph.input_shape = meta.at("input_shape").get<std::vector<std::int64_t>>();
    graph.num_classes = meta.at("num_classes").get<int>();
    graph.input_mean = meta.at("input_mean").get<std::vector<float>>();
    graph.input_std = meta.at("input_std").get<std::vector<float>>();
    graph.input_padding = meta.at("input_padding").get<std::int64_t>();
    graph.input_pad_value = meta.at("input_pad_value").get<std::vector<float>>();
    for (const Json& entry : meta.at("nodes"))
      graph.nodes.push_back(node_from_metadata(entry));
  } catch (const Json::exception& error) {
    fail(ErrorCategory::invalid_input, "'" + where + "': damaged graph metadata: " + error.what());
  }
  return graph;
}

void save_graph(const std::string& path, const Graph& graph, const Json& extra) {
  Json meta = graph_metadata(graph);
  meta["extra"] = extra;
  torch::serialize::OutputArchive archive;
  archive.write("ipj_graph_format", c10::IValue(static_cast<std::int64_t>(kGraphFormatVersion)));
  archive.write("meta_json", c10::IValue(meta.dump()));
  for (std::size_t index = 0; index < graph.nodes.size(); ++index) {
    const GraphNode& node = graph.nodes[index];
    if (!has_weights(node)) continue;
    archive.write("node" + std::to_string(index) + ".weight", node.weight.detach().contiguous());
    archive.write("node" + std::to_string(index) + ".bias", node.bias.detach().contiguous());
  }
  save_sealed_archive(archive, path);
}

bool is_graph_file(const std::string& path) {
  try {
    return detect_model_file(path) == ModelFileFormat::graph;
  } catch (const std::exception&) {  // any damage: "not this format"; its loader says why
    return false;
  }
}

GraphFile load_graph(const std::string& path) try {
  OpenedArchive opened = open_ipj_archive(path, "ipj_graph_format", kGraphFormatVersion, "graph file");
  torch::serialize::InputArchive& archive = opened.archive;
  const Json& meta = opened.meta;
  GraphFile file;
  try {
    file.graph = graph_from_metadata(meta, path);
    file.extra = meta.value("extra", Json::object());
    for (std::size_t index = 0; index < file.graph.nodes.size(); ++index) {
      GraphNode& node = file.graph.nodes[index];
      if (!has_weights(node)) continue;
      torch::Tensor weight, bias;  // fresh tensors: reading into a defined one would alias it
      archive.read("node" + std::to_string(index) + ".weight", weight);
      archive.read("node" + std::to_string(index) + ".bias", bias);
      node.weight = weight;
      node.bias = bias;
    }
  } catch (const Json::exception& error) {
    fail(ErrorCategory::invalid_input, "'" + path + "': damaged graph metadata: " + error.what());
  } catch (const c10::Error& error) {
    fail(ErrorCategory::invalid_input, "'" + path + "': damaged graph: " + error.what_without_backtrace());
  }
  validate_graph(file.graph, path);
  return file;
} catch (...) {
  rethrow_as_load_error(path, "ipj graph file");
}

}  // namespace ipj::quant
