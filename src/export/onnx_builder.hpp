// Private to the export module: a small writer of ONNX protobuf (libonnx's onnx::GraphProto): initializers
// from LibTorch tensors (float32, int8, uint8, int64), nodes with attributes, typed graph inputs/outputs.
// Names must be unique; the writer does not check graph semantics (libonnx's checker does, see onnx_check).
#pragma once

#include <onnx/onnx_pb.h>
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ipj::exporter {

class OnnxGraphWriter {
 public:
  explicit OnnxGraphWriter(onnx::GraphProto& graph) : graph_(graph) {}

  // Stores `tensor` (contiguous copy, dtype kept: float, int8, uint8 or int64) as initializer `name`.
  const std::string& initializer(const std::string& name, const torch::Tensor& tensor);
  // One node `op_type` named after its first output.
  onnx::NodeProto& node(const std::string& op_type, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs);
  // A float32 graph input or output [batch, dims...]: the first dimension is the symbolic `batch_name`.
  void add_input(const std::string& name, const std::vector<std::int64_t>& dims,
                 const std::string& batch_name);
  void add_output(const std::string& name, const std::vector<std::int64_t>& dims,
                  const std::string& batch_name);

 private:
  onnx::GraphProto& graph_;
};

void set_attribute(onnx::NodeProto& node, const std::string& name, std::int64_t value);
void set_attribute(onnx::NodeProto& node, const std::string& name, const std::vector<std::int64_t>& values);
void set_attribute(onnx::NodeProto& node, const std::string& name, float value);

}  // namespace ipj::exporter
