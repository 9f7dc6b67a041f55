// KServe v2 / Open Inference Protocol request and response bodies: JSON tensors (flat or nested data) and the
// binary tensor extension (Inference-Header-Content-Length + raw little-endian bytes after the JSON header).
// Bodies are read by a bounded one-pass parser: nesting, "id", "parameters" and "outputs" have size and depth
// limits, the declared shape is checked before any allocation, and numbers go straight into the tensor, so a
// body costs memory proportional to the tensor it declares. Malformed bodies raise ipj::Error(invalid_input)
// (400); a tensor above the memory cap raises RequestTooLarge (413).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ipj/core/error.hpp"
#include "ipj/core/json_io.hpp"
#include "ipj/energy/measurement.hpp"
#include "ipj/serve/model_repository.hpp"

namespace ipj::serve {

// A request whose declared tensor exceeds RequestLimits::max_tensor_bytes (the server answers 413).
class RequestTooLarge : public Error {
 public:
  explicit RequestTooLarge(const std::string& message) : Error(ErrorCategory::invalid_input, message) {}
};

struct RequestLimits {
  std::size_t max_tensor_bytes = std::size_t{256} << 20;  // FP32 bytes of one request's input tensor
  std::size_t max_id_bytes = 1024;                        // "id" as JSON text
  std::size_t max_parameters_bytes = 4096;                // each "parameters" object as JSON text
  std::size_t max_outputs_bytes = 16384;                  // the "outputs" list as JSON text
  int max_data_depth = 32;                                // nesting of inputs[0].data
  int max_small_depth = 8;  // nesting of id / parameters / outputs / unknown keys
  std::int64_t max_timeout_us = std::int64_t{3600} * 1000000;  // longer "timeout" values are clamped to this
};

struct InferRequest {
  std::optional<Json> id;  // echoed back as given
  std::vector<std::int64_t> shape;
  std::vector<float> data;     // row-major, finite values only
  bool binary_output = false;  // reply with the binary extension
  std::optional<std::int64_t> timeout_us;
  std::vector<std::string> requested_outputs;  // empty = all
};

// `header_length`: the Inference-Header-Content-Length value, if the header was sent.
InferRequest parse_infer_request(std::string_view body, std::optional<std::size_t> header_length,
                                 const ModelConfig& model, const RequestLimits& limits = {});

struct EncodedResponse {
  std::string body;
  std::string content_type;
  std::optional<std::size_t> header_length;  // set for binary replies
};

// Per-request figures a response may carry in its "parameters" (absent when `source` is none).
struct ResponseEnergy {
  double joules = 0.0;
  energy::ReportedSource source;  // none: the response carries no energy parameters
};

EncodedResponse encode_infer_response(const ModelConfig& model, const std::string& version,
                                      const InferRequest& request, const std::vector<std::int64_t>& shape,
                                      const std::vector<float>& values, const ResponseEnergy& energy = {});

}  // namespace ipj::serve
