// ONNX protobuf writing helpers (see onnx_builder.hpp).
#include "onnx_builder.hpp"

#include "ipj/core/error.hpp"

namespace ipj::exporter {
namespace {

int onnx_element_type(torch::ScalarType type) {
  switch (type) {
    case torch::kFloat:
      return onnx::TensorProto::FLOAT;
    case torch::kChar:
      return onnx::TensorProto::INT8;
    case torch::kByte:
      return onnx::TensorProto::UINT8;
    case torch::kLong:
      return onnx::TensorProto::INT64;
    default:
      fail(ErrorCategory::internal,
           std::string("ONNX initializer of unsupported dtype ") + c10::toString(type));
  }
}

void set_value_info(onnx::ValueInfoProto& info, const std::string& name,
                    const std::vector<std::int64_t>& dims, const std::string& batch_name) {
  info.set_name(name);
  onnx::TypeProto_Tensor* tensor = info.mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(onnx::TensorProto::FLOAT);
  onnx::TensorShapeProto* shape = tensor->mutable_shape();
  shape->add_dim()->set_dim_param(batch_name);
  for (const std::int64_t dim : dims)
    shape->add_dim()->set_dim_value(dim);
}

}  // namespace

const std::string& OnnxGraphWriter::initializer(const std::string& name, const torch::Tensor& tensor) {
  const torch::Tensor data = tensor.detach().cpu().contiguous();
  onnx::TensorProto* proto = graph_.add_initializer();
  proto->set_name(name);
  proto->set_data_type(onnx_element_type(data.scalar_type()));
  for (const std::int64_t dim : data.sizes())
    proto->add_dims(dim);
  proto->set_raw_data(data.data_ptr(), static_cast<std::size_t>(data.numel()) * data.element_size());
  return proto->name();
}

onnx::NodeProto& OnnxGraphWriter::node(const std::string& op_type, const std::vector<std::string>& inputs,
                                       const std::vector<std::string>& outputs) {
  onnx::NodeProto* node = graph_.add_node();
  node->set_op_type(op_type);
  node->set_name(outputs.at(0));
  for (const std::string& input : inputs)
    node->add_input(input);
  for (const std::string& output : outputs)
    node->add_output(output);
  return *node;
}

void OnnxGraphWriter::add_input(const std::string& name, const std::vector<std::int64_t>& dims,
                                const std::string& batch_name) {
  set_value_info(*graph_.add_input(), name, dims, batch_name);
}

void OnnxGraphWriter::add_output(const std::string& name, const std::vector<std::int64_t>& dims,
                                 const std::string& batch_name) {
  set_value_info(*graph_.add_output(), name, dims, batch_name);
}

void set_attribute(onnx::NodeProto& node, const std::string& name, std::int64_t value) {
  onnx::AttributeProto* attribute = node.add_attribute();
  attribute->set_name(name);
  attribute->set_type(onnx::AttributeProto::INT);
  attribute->set_i(value);
}

void set_attribute(onnx::NodeProto& node, const std::string& name, const std::vector<std::int64_t>& values) {
  onnx::AttributeProto* attribute = node.add_attribute();
  attribute->set_name(name);
  attribute->set_type(onnx::AttributeProto::INTS);
  for (const std::int64_t value : values)
    attribute->add_ints(value);
}

void set_attribute(onnx::NodeProto& node, const std::string& name, float value) {
  onnx::AttributeProto* attribute = node.add_attribute();
  attribute->set_name(name);
  attribute->set_type(onnx::AttributeProto::FLOAT);
  attribute->set_f(value);
}

}  // namespace ipj::exporter
