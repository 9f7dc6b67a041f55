// Graph IR from ipj's own models: the zoo ResNet-18/50 (by parameter names, BatchNorm and the input
// normalisation folded) and LayerPrograms (mlp, cnn and their pruned program files).
#pragma once

#include "ipj/core/json_io.hpp"
#include "ipj/models/classifier.hpp"
#include "ipj/quant/graph.hpp"
#include "ipj/quant/layer_program.hpp"

namespace ipj::quant {

// The same computation as run_float(program, pixels).
Graph graph_from_program(const LayerProgram& program);
// `model_info` is the checkpoint's {"name", "input_shape", "num_classes", "mean", "std"}: resnet18/50 are
// built from their parameters, mlp/cnn through extract_program. Throws ipj::Error(unsupported) for others.
Graph extract_graph(models::Classifier& model, const Json& model_info);

}  // namespace ipj::quant
