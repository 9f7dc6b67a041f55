// Float graph IR on disk ("ipj-graph" files: what `ipj prune` writes for imported and residual models) and
// the graph metadata (everything but tensors) that the int8 graph files share. One LibTorch archive: a JSON
// description plus "node<i>.weight" / "node<i>.bias" tensors; written atomically.
#pragma once

#include <string>

#include "ipj/core/json_io.hpp"
#include "ipj/quant/graph.hpp"

namespace ipj::quant {

// 2: the layout of 1, always sealed with a checksum (core/checked_file.hpp); format 1 files are still read.
inline constexpr int kGraphFormatVersion = 2;

struct GraphFile {
  Graph graph;
  Json extra;  // provenance: source file, data set, accuracy, pruning settings
};

void save_graph(const std::string& path, const Graph& graph, const Json& extra);
// Throws ipj::Error(invalid_input) when `path` is not an ipj graph file or is damaged.
GraphFile load_graph(const std::string& path);
bool is_graph_file(const std::string& path);

// The graph without its tensors: model name, shapes, normalisation, nodes (kind, name, inputs, attributes).
Json graph_metadata(const Graph& graph);
// Inverse of graph_metadata (tensors left undefined); throws ipj::Error(invalid_input) naming `where`.
Graph graph_from_metadata(const Json& meta, const std::string& where);

}  // namespace ipj::quant
