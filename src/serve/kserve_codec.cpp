// Parsing and encoding of KServe v2 inference bodies for one FP32 input and one FP32 output.
#include "ipj/serve/kserve_codec.hpp"

#include <charconv>
#include <cstring>

#include "ipj/core/error.hpp"

namespace ipj::serve {
namespace {

[[noreturn]] void bad(const std::string& message) {
  fail(ErrorCategory::invalid_input, message);
}

// Appends every number of a (possibly nested) JSON array in row-major order.
void flatten(const Json& value, std::vector<float>& out, std::size_t limit) {
  if (value.is_array()) {
    for (const Json& item : value)
      flatten(item, out, limit);
    return;
  }
  if (!value.is_number())
    bad("input data holds a " + std::string(value.type_name()) + "; FP32 data must be numbers");
  if (out.size() >= limit) bad("input data holds more values than its shape says");
  out.push_back(value.get<float>());
}

std::int64_t element_count(const std::vector<std::int64_t>& shape) {
  std::int64_t count = 1;
  for (const std::int64_t dim : shape) {
    if (dim < 0) bad("input shape entries must be >= 0");
    if (dim > 0 && count > (std::int64_t{1} << 40) / dim) bad("input shape is too large");
    count *= dim;
  }
  return count;
}

// Fast path for the one large part of a JSON request: inputs[0].data, an array (possibly nested) of numbers.
// nlohmann::json needs ~130 us for 784 floats (a DOM node and strtod per number); locating the array with a
// structural scan and reading it with std::from_chars takes ~10 us. The rest of the body still goes through
// nlohmann (with the array replaced by []), so its validation is unchanged.
struct DataRange {
  std::size_t begin = 0, end = 0;  // [begin, end) of the array text, or begin == end when not found
};

std::size_t skip_string(const std::string& text, std::size_t at, std::size_t limit) {  // at: opening quote
  for (++at; at < limit; ++at) {
    if (text[at] == '\\')
      ++at;
    else if (text[at] == '"')
      return at + 1;
  }
  return limit;  // unterminated: nlohmann reports it
}

DataRange find_input_data(const std::string& text, std::size_t limit) {
  struct Frame {
    bool object;
    std::string key;
    int index = 0;
  };
  std::vector<Frame> stack;
  bool expect_key = false;
  std::string last_string;
  for (std::size_t at = 0; at < limit;) {
    const char c = text[at];
    if (c == '"') {
      const std::size_t end = skip_string(text, at, limit);
      if (expect_key && !stack.empty() && stack.back().object) {
        stack.back().key = text.substr(at + 1, end - at - 2);
        expect_key = false;
      }
      at = end;
      continue;
    }
    if (c == '{' || c == '[') {
      const bool at_data = c == '[' && stack.size() == 3 && stack[0].object && stack[0].key == "inputs" &&
                           !stack[1].object && stack[1].index == 0 && stack[2].object &&
                           stack[2].key == "data";
      if (at_data) {
        int depth = 0;
        for (std::size_t end = at; end < limit; ++end) {
          if (text[end] == '"') return {};  // strings inside: leave it to the full parser (and its error)
          if (text[end] == '[') ++depth;
          if (text[end] == ']' && --depth == 0) return {at, end + 1};
        }
        return {};
      }
      stack.push_back({c == '{', "", 0});
      expect_key = c == '{';
    } else if (c == '}' || c == ']') {
      if (stack.empty()) return {};
      stack.pop_back();
    } else if (c == ',') {
      if (stack.empty()) return {};
      if (stack.back().object)
        expect_key = true;
      else
        ++stack.back().index;
    }
    ++at;
  }
  return {};
}

bool is_space(char c) {
  return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

// Reads a nested array of JSON numbers in [at, end) into `out`; false on anything else.
bool read_numbers(const char*& at, const char* end, std::vector<float>& out, std::size_t limit) {
  auto skip = [&] {
    while (at < end && is_space(*at))
      ++at;
  };
  skip();
  if (at >= end || *at != '[') return false;
  ++at;
  skip();
  if (at < end && *at == ']') {
    ++at;
    return true;
  }
  for (;;) {
    skip();
    if (at >= end) return false;
    if (*at == '[') {
      if (!read_numbers(at, end, out, limit)) return false;
    } else {
      if (*at != '-' && (*at < '0' || *at > '9')) return false;  // no inf/nan/hex: JSON numbers only
      if (out.size() >= limit) bad("input data holds more values than its shape says");
      float value = 0.0f;
      const auto result = std::from_chars(at, end, value);
      if (result.ec == std::errc::invalid_argument) return false;
      if (result.ec == std::errc::result_out_of_range)
        bad("input data holds a number outside the FP32 range");
      out.push_back(value);
      at = result.ptr;
    }
    skip();
    if (at < end && *at == ',') {
      ++at;
      continue;
    }
    if (at < end && *at == ']') {
      ++at;
      return true;
    }
    return false;
  }
}

}  // namespace

InferRequest parse_infer_request(const std::string& body, std::optional<std::size_t> header_length,
                                 const ModelConfig& model) {
  if (header_length && *header_length > body.size())
    bad("Inference-Header-Content-Length " + std::to_string(*header_length) + " exceeds the body (" +
        std::to_string(body.size()) + " bytes)");
  const std::size_t json_length = header_length ? *header_length : body.size();
  Json request;
  const DataRange data_range = find_input_data(body, json_length);
  try {
    if (data_range.begin < data_range.end) {
      std::string rest = body.substr(0, data_range.begin);
      rest += "[]";
      rest.append(body, data_range.end, json_length - data_range.end);
      request = Json::parse(rest);
    } else {
      request = Json::parse(body.data(), body.data() + json_length);
    }
  } catch (const Json::parse_error& error) {
    bad(std::string("request body is not valid JSON: ") + error.what());
  }
  if (!request.is_object()) bad("request body must be a JSON object");
  InferRequest parsed;
  if (request.contains("id")) parsed.id = request["id"];
  if (request.contains("parameters")) {
    const Json& parameters = request["parameters"];
    if (!parameters.is_object()) bad("\"parameters\" must be an object");
    if (parameters.contains("binary_data_output"))
      parsed.binary_output = parameters["binary_data_output"] == true;
    if (parameters.contains("timeout")) {
      if (!parameters["timeout"].is_number_integer() || parameters["timeout"].get<std::int64_t>() <= 0)
        bad("parameter \"timeout\" must be a positive integer (microseconds)");
      parsed.timeout_us = parameters["timeout"].get<std::int64_t>();
    }
  }
  if (!request.contains("inputs") || !request["inputs"].is_array() || request["inputs"].size() != 1)
    bad("\"inputs\" must list exactly one tensor ('" + model.input.name + "')");
  const Json& input = request["inputs"][0];
  if (!input.is_object()) bad("\"inputs\"[0] must be an object");
  if (input.value("name", std::string()) != model.input.name)
    bad("unknown input '" + input.value("name", std::string()) + "': model '" + model.name + "' takes '" +
        model.input.name + "'");
  if (input.value("datatype", std::string()) != model.input.datatype)
    bad("input '" + model.input.name + "' has datatype '" + input.value("datatype", std::string()) +
        "', expected " + model.input.datatype);
  if (!input.contains("shape") || !input["shape"].is_array()) bad("input needs a \"shape\" list");
  for (const Json& dim : input["shape"]) {
    if (!dim.is_number_integer()) bad("input shape entries must be integers");
    parsed.shape.push_back(dim.get<std::int64_t>());
  }
  const auto& expected = model.input.shape;
  if (parsed.shape.size() != expected.size())
    bad("input shape has " + std::to_string(parsed.shape.size()) + " dims, model '" + model.name +
        "' expects " + std::to_string(expected.size()));
  for (std::size_t dim = 0; dim < expected.size(); ++dim) {
    if (expected[dim] != -1 && parsed.shape[dim] != expected[dim])
      bad("input dim " + std::to_string(dim) + " is " + std::to_string(parsed.shape[dim]) + ", model '" +
          model.name + "' expects " + std::to_string(expected[dim]));
    if (parsed.shape[dim] < 1) bad("input dims must be >= 1");
  }
  if (model.batching.max_batch_size > 0 && parsed.shape[0] > model.batching.max_batch_size)
    bad("batch of " + std::to_string(parsed.shape[0]) + " exceeds max_batch_size " +
        std::to_string(model.batching.max_batch_size) + " of model '" + model.name + "'");
  const std::int64_t count = element_count(parsed.shape);

  const Json* parameters = input.contains("parameters") ? &input["parameters"] : nullptr;
  if (parameters && parameters->contains("binary_data_size")) {
    if (!header_length) bad("binary_data_size needs the Inference-Header-Content-Length header");
    const std::int64_t size = (*parameters)["binary_data_size"].get<std::int64_t>();
    if (size != count * 4)
      bad("binary_data_size " + std::to_string(size) + " does not match shape (" + std::to_string(count * 4) +
          " bytes of FP32)");
    if (body.size() - json_length != static_cast<std::size_t>(size))
      bad("binary body holds " + std::to_string(body.size() - json_length) +
          " bytes, binary_data_size says " + std::to_string(size));
    parsed.data.resize(static_cast<std::size_t>(count));
    std::memcpy(parsed.data.data(), body.data() + json_length,
                static_cast<std::size_t>(size));  // little-endian
  } else {
    if (!input.contains("data"))
      bad("input '" + model.input.name + "' has neither \"data\" nor binary_data_size");
    parsed.data.reserve(static_cast<std::size_t>(count));
    if (data_range.begin < data_range.end) {
      const char* at = body.data() + data_range.begin;
      if (!read_numbers(at, body.data() + data_range.end, parsed.data, static_cast<std::size_t>(count)))
        bad("input data must be a (nested) list of JSON numbers");
    } else {
      flatten(input["data"], parsed.data, static_cast<std::size_t>(count));
    }
    if (static_cast<std::int64_t>(parsed.data.size()) != count)
      bad("input data holds " + std::to_string(parsed.data.size()) + " values, shape needs " +
          std::to_string(count));
  }
  if (request.contains("outputs")) {
    if (!request["outputs"].is_array()) bad("\"outputs\" must be a list");
    for (const Json& output : request["outputs"]) {
      const std::string name = output.value("name", std::string());
      if (name != model.output.name)
        bad("unknown output '" + name + "': model '" + model.name + "' has '" + model.output.name + "'");
      parsed.requested_outputs.push_back(name);
      if (output.contains("parameters") && output["parameters"].value("binary_data", false))
        parsed.binary_output = true;
    }
  }
  return parsed;
}

EncodedResponse encode_infer_response(const ModelConfig& model, const std::string& version,
                                      const InferRequest& request, const std::vector<std::int64_t>& shape,
                                      const std::vector<float>& values) {
  Json response;
  response["model_name"] = model.name;
  response["model_version"] = version;
  if (request.id) response["id"] = *request.id;
  Json output = {{"name", model.output.name}, {"datatype", "FP32"}, {"shape", shape}};
  EncodedResponse encoded;
  if (request.binary_output) {
    output["parameters"] = {{"binary_data_size", values.size() * 4}};
    response["outputs"] = Json::array({output});
    encoded.body = response.dump();
    encoded.header_length = encoded.body.size();
    encoded.body.append(reinterpret_cast<const char*>(values.data()), values.size() * 4);
    encoded.content_type = "application/octet-stream";
  } else {
    output["data"] = values;
    response["outputs"] = Json::array({output});
    encoded.body = response.dump();
    encoded.content_type = "application/json";
  }
  return encoded;
}

}  // namespace ipj::serve
