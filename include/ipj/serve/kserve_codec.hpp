// KServe v2 / Open Inference Protocol request and response bodies: JSON tensors (flat or nested data) and the
// binary tensor extension (Inference-Header-Content-Length + raw little-endian bytes after the JSON header).
// Every malformed body raises ipj::Error(invalid_input) with a message fit for the client's 400 reply.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ipj/core/json_io.hpp"
#include "ipj/serve/model_repository.hpp"

namespace ipj::serve {

struct InferRequest {
  std::optional<Json> id;  // echoed back as given
  std::vector<std::int64_t> shape;
  std::vector<float> data;
  bool binary_output = false;  // reply with the binary extension
  std::optional<std::int64_t> timeout_us;
  std::vector<std::string> requested_outputs;  // empty = all
};

// `header_length`: the Inference-Header-Content-Length value, if the header was sent.
InferRequest parse_infer_request(const std::string& body, std::optional<std::size_t> header_length,
                                 const ModelConfig& model);

struct EncodedResponse {
  std::string body;
  std::string content_type;
  std::optional<std::size_t> header_length;  // set for binary replies
};
EncodedResponse encode_infer_response(const ModelConfig& model, const std::string& version,
                                      const InferRequest& request, const std::vector<std::int64_t>& shape,
                                      const std::vector<float>& values);

}  // namespace ipj::serve
