// libonnx's model checker and strict shape inference on a serialized model, and a short summary of it.
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <map>

#include "ipj/core/error.hpp"
#include "ipj/export/onnx_export.hpp"

namespace ipj::exporter {
namespace {

onnx::ModelProto parse_model(const std::string& serialized, const std::string& where) {
  onnx::ModelProto model;
  if (!model.ParseFromString(serialized))
    fail(ErrorCategory::invalid_input, where + ": not a serialized ONNX model (protobuf parse failed)");
  return model;
}

}  // namespace

void check_onnx_model(const std::string& serialized, const std::string& where) {
  onnx::ModelProto model = parse_model(serialized, where);
  try {
    onnx::checker::check_model(model);
    // check_type + error_mode 1: a node whose inputs do not fit its operator fails here, and the inferred
    // output shape must merge with the declared [batch, classes].
    onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(true, 1, false));
  } catch (const onnx::checker::ValidationError& error) {
    fail(ErrorCategory::unsupported, where + ": the ONNX model fails libonnx's checker: " + error.what());
  } catch (const onnx::InferenceError& error) {
    fail(ErrorCategory::unsupported,
         where + ": the ONNX model fails libonnx's shape inference: " + error.what());
  } catch (const std::runtime_error& error) {
    fail(ErrorCategory::unsupported, where + ": the ONNX model fails libonnx's checks: " + error.what());
  }
}

Json onnx_model_summary(const std::string& serialized) {
  const onnx::ModelProto model = parse_model(serialized, "ONNX summary");
  std::map<std::string, int> operators;
  for (const onnx::NodeProto& node : model.graph().node())
    ++operators[node.op_type()];
  Json summary;
  summary["opset"] = model.opset_import_size() > 0 ? model.opset_import(0).version() : 0;
  summary["nodes"] = model.graph().node_size();
  summary["initializers"] = model.graph().initializer_size();
  summary["operators"] = operators;
  summary["input"] = model.graph().input_size() > 0 ? model.graph().input(0).name() : "";
  summary["output"] = model.graph().output_size() > 0 ? model.graph().output(0).name() : "";
  return summary;
}

}  // namespace ipj::exporter
