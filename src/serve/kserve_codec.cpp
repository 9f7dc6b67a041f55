// Parsing and encoding of KServe v2 inference bodies for one FP32 input and one FP32 output. One pass over
// the body with a bounded cursor: the small parts ("id", "parameters", "outputs", name, datatype) are size-
// and depth-checked before nlohmann::json sees them; inputs[0].data is read number by number into the tensor.
#include "ipj/serve/kserve_codec.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include "bounded_json.hpp"

namespace ipj::serve {
namespace {

[[noreturn]] void bad(const std::string& message) {
  fail(ErrorCategory::invalid_input, message);
}

constexpr std::size_t kMaxKeyBytes = 256;
constexpr std::size_t kMaxNameBytes = 256;
constexpr std::size_t kMaxDims = 16;

std::int64_t to_integer(std::string_view text, const char* what) {
  std::int64_t value = 0;
  const auto result = std::from_chars(text.data(), text.data() + text.size(), value);
  if (result.ec != std::errc() || result.ptr != text.data() + text.size())
    bad(std::string(what) + " must be integers, got " + std::string(text.substr(0, 40)));
  return value;
}

class RequestReader {
 public:
  RequestReader(std::string_view json, const ModelConfig& model, const RequestLimits& limits,
                InferRequest& out)
      : cursor_(json.data(), json.data() + json.size()),
        json_length_(json.size()),
        model_(model),
        limits_(limits),
        out_(out) {}

  void read_body();
  // After read_body(): the binary tensor bytes, if the request declared them.
  void finish(std::string_view binary_part, bool has_header_length);

 private:
  Json read_small(std::size_t max_bytes, const char* context) {
    const std::string_view text = cursor_.skip_value(limits_.max_small_depth, max_bytes, context);
    return Json::parse(text.begin(), text.end());  // bounded: size and depth were checked
  }
  void read_parameters();
  void read_outputs();
  void read_inputs();
  void read_input_tensor();
  void read_shape();
  void check_shape();
  void read_data();
  void read_numbers(int depth_left, std::size_t limit);
  void check_nesting() const;

  JsonCursor cursor_;
  std::size_t json_length_;
  const ModelConfig& model_;
  const RequestLimits& limits_;
  InferRequest& out_;
  std::optional<std::string> input_name_, input_datatype_;
  bool has_shape_ = false, has_data_ = false;
  // Nested "data": per depth, the length every list there has and whether those lists hold numbers (the
  // innermost depth) or lists; every list at one depth must agree (no ragged or mixed nesting).
  struct NestingLevel {
    bool seen = false;  // a list at this depth has ended
    std::size_t length = 0;
    bool holds_numbers = true;
  };
  std::vector<NestingLevel> nesting_;
  std::int64_t element_count_ = 0;
  std::optional<std::int64_t> binary_data_size_;
};

void RequestReader::read_body() {
  if (cursor_.peek() != '{') bad("request body must be a JSON object");
  cursor_.expect('{', "the request");
  bool seen_id = false, seen_parameters = false, seen_inputs = false, seen_outputs = false;
  auto once = [this](bool& seen, const std::string& key) {
    if (seen) cursor_.fail_here("duplicate key \"" + key + "\"");
    seen = true;
  };
  if (cursor_.consume('}')) bad("\"inputs\" must list exactly one tensor ('" + model_.input.name + "')");
  do {
    const std::string key = cursor_.read_string(kMaxKeyBytes, "a key");
    cursor_.expect(':', "the request");
    if (key == "id") {
      once(seen_id, key);
      out_.id = read_small(limits_.max_id_bytes, "\"id\"");
    } else if (key == "parameters") {
      once(seen_parameters, key);
      read_parameters();
    } else if (key == "inputs") {
      once(seen_inputs, key);
      read_inputs();
    } else if (key == "outputs") {
      once(seen_outputs, key);
      read_outputs();
    } else {  // unknown keys are ignored, within the same limits
      cursor_.skip_value(limits_.max_small_depth, limits_.max_parameters_bytes, "an unknown key's value");
    }
  } while (cursor_.consume(','));
  cursor_.expect('}', "the request");
  cursor_.expect_end();
  if (!seen_inputs) bad("\"inputs\" must list exactly one tensor ('" + model_.input.name + "')");
}

void RequestReader::read_parameters() {
  const Json parameters = read_small(limits_.max_parameters_bytes, "\"parameters\"");
  if (!parameters.is_object()) bad("\"parameters\" must be an object");
  if (parameters.contains("binary_data_output"))
    out_.binary_output = parameters["binary_data_output"] == true;
  if (!parameters.contains("timeout")) return;
  const Json& timeout = parameters["timeout"];
  const double value = timeout.is_number() ? timeout.get<double>() : 0.0;
  if (!(value >= 1.0))  // NaN cannot come from JSON; this refuses strings, 0 and negatives
    bad("parameter \"timeout\" must be a positive number of microseconds");
  // Longer timeouts are clamped (a deadline centuries away would overflow the clock).
  out_.timeout_us = value >= static_cast<double>(limits_.max_timeout_us) ? limits_.max_timeout_us
                                                                         : static_cast<std::int64_t>(value);
}

void RequestReader::read_outputs() {
  const Json outputs = read_small(limits_.max_outputs_bytes, "\"outputs\"");
  if (!outputs.is_array()) bad("\"outputs\" must be a list");
  for (const Json& output : outputs) {
    if (!output.is_object() || !output.contains("name") || !output["name"].is_string())
      bad("each entry of \"outputs\" needs a \"name\" string");
    const std::string name = output["name"].get<std::string>();
    if (name != model_.output.name)
      bad("unknown output '" + name + "': model '" + model_.name + "' has '" + model_.output.name + "'");
    out_.requested_outputs.push_back(name);
    if (!output.contains("parameters")) continue;
    const Json& parameters = output["parameters"];
    if (!parameters.is_object()) bad("\"outputs\"[].parameters must be an object");
    if (parameters.contains("binary_data") && parameters["binary_data"] == true) out_.binary_output = true;
  }
}

void RequestReader::read_inputs() {
  if (cursor_.peek() != '[') bad("\"inputs\" must list exactly one tensor ('" + model_.input.name + "')");
  cursor_.expect('[', "\"inputs\"");
  if (cursor_.peek() != '{') bad("\"inputs\" must list exactly one tensor ('" + model_.input.name + "')");
  read_input_tensor();
  if (cursor_.peek() != ']') bad("\"inputs\" must list exactly one tensor ('" + model_.input.name + "')");
  cursor_.expect(']', "\"inputs\"");
}

void RequestReader::read_input_tensor() {
  cursor_.expect('{', "\"inputs\"[0]");
  if (cursor_.consume('}')) bad("input needs a \"shape\" list");
  bool seen_parameters = false;
  do {
    const std::string key = cursor_.read_string(kMaxKeyBytes, "a key of \"inputs\"[0]");
    cursor_.expect(':', "\"inputs\"[0]");
    const bool duplicate = (key == "name" && input_name_) || (key == "datatype" && input_datatype_) ||
                           (key == "shape" && has_shape_) || (key == "data" && has_data_) ||
                           (key == "parameters" && seen_parameters);
    if (duplicate) cursor_.fail_here("duplicate key \"" + key + "\" in \"inputs\"[0]");
    if (key == "name") {
      input_name_ = cursor_.read_string(kMaxNameBytes, "the input's \"name\"");
    } else if (key == "datatype") {
      input_datatype_ = cursor_.read_string(kMaxNameBytes, "the input's \"datatype\"");
    } else if (key == "shape") {
      read_shape();
    } else if (key == "parameters") {
      seen_parameters = true;
      const Json parameters = read_small(limits_.max_parameters_bytes, "the input's \"parameters\"");
      if (!parameters.is_object()) bad("the input's \"parameters\" must be an object");
      if (parameters.contains("binary_data_size")) {
        const Json& size = parameters["binary_data_size"];
        if (!size.is_number_integer() || size.get<std::int64_t>() < 0)
          bad("binary_data_size must be a non-negative integer");
        binary_data_size_ = size.get<std::int64_t>();
      }
    } else if (key == "data") {
      read_data();
    } else {
      cursor_.skip_value(limits_.max_small_depth, limits_.max_parameters_bytes, "an unknown key's value");
    }
  } while (cursor_.consume(','));
  cursor_.expect('}', "\"inputs\"[0]");
}

void RequestReader::read_shape() {
  if (cursor_.peek() != '[') bad("input needs a \"shape\" list");
  cursor_.expect('[', "\"shape\"");
  out_.shape.clear();
  if (!cursor_.consume(']')) {
    do {
      if (out_.shape.size() >= kMaxDims)
        bad("input shape has more than " + std::to_string(kMaxDims) + " dims");
      const char next = cursor_.peek();
      if (next != '-' && (next < '0' || next > '9')) bad("input shape entries must be integers");
      out_.shape.push_back(to_integer(cursor_.read_number_text("\"shape\""), "input shape entries"));
    } while (cursor_.consume(','));
    cursor_.expect(']', "\"shape\"");
  }
  has_shape_ = true;
  check_shape();
}

// The declared shape against the model, max_batch_size and the memory cap: before anything is allocated.
void RequestReader::check_shape() {
  const auto& expected = model_.input.shape;
  const auto& shape = out_.shape;
  if (shape.size() != expected.size())
    bad("input shape has " + std::to_string(shape.size()) + " dims, model '" + model_.name + "' expects " +
        std::to_string(expected.size()));
  for (std::size_t dim = 0; dim < expected.size(); ++dim) {
    if (expected[dim] != -1 && shape[dim] != expected[dim])
      bad("input dim " + std::to_string(dim) + " is " + std::to_string(shape[dim]) + ", model '" +
          model_.name + "' expects " + std::to_string(expected[dim]));
    if (shape[dim] < 1) bad("input dims must be >= 1");
  }
  if (model_.batching.max_batch_size > 0 && shape[0] > model_.batching.max_batch_size)
    bad("batch of " + std::to_string(shape[0]) + " exceeds max_batch_size " +
        std::to_string(model_.batching.max_batch_size) + " of model '" + model_.name + "'");
  const std::int64_t cap = static_cast<std::int64_t>(limits_.max_tensor_bytes / sizeof(float));
  std::int64_t count = 1;
  for (const std::int64_t dim : shape) {
    if (count > cap / dim)
      throw RequestTooLarge("input shape declares more than " + std::to_string(limits_.max_tensor_bytes) +
                            " bytes of FP32 (the server's per-request limit)");
    count *= dim;
  }
  element_count_ = count;
}

void RequestReader::read_data() {
  has_data_ = true;
  // Each JSON number takes at least one character plus a separator: a body of L bytes holds at most
  // (L + 1) / 2 values, which bounds the allocation even before the shape is known.
  std::size_t limit = (json_length_ + 1) / 2;
  limit = std::min(limit, limits_.max_tensor_bytes / sizeof(float));
  if (has_shape_) {
    if (static_cast<std::size_t>(element_count_) > (json_length_ + 1) / 2)
      bad("input data cannot hold the " + std::to_string(element_count_) +
          " values its shape declares in a " + std::to_string(json_length_) + "-byte body");
    limit = static_cast<std::size_t>(element_count_);
    out_.data.reserve(limit);
  }
  if (cursor_.peek() != '[') bad("input data must be a (nested) list of JSON numbers");
  read_numbers(limits_.max_data_depth, limit);
}

// A nested array of numbers, appended in row-major order; depth_left bounds the recursion. Records each
// depth's list length and kind (nesting_): lists of one depth that differ are refused here, a nesting that
// does not fit the shape in finish().
void RequestReader::read_numbers(int depth_left, std::size_t limit) {
  if (depth_left <= 0)
    bad("input data is nested deeper than " + std::to_string(limits_.max_data_depth) + " levels");
  const std::size_t depth = static_cast<std::size_t>(limits_.max_data_depth - depth_left);
  cursor_.expect('[', "input data");
  std::size_t length = 0;
  std::optional<bool> holds_numbers;  // unknown for an empty list
  const auto entry = [&](bool number) {
    if (holds_numbers && *holds_numbers != number)
      bad("input data mixes numbers and lists at depth " + std::to_string(depth) +
          " (nest it as the shape, or send it flat)");
    holds_numbers = number;
    ++length;
  };
  if (!cursor_.consume(']')) {
    do {
      const char next = cursor_.peek();
      entry(next != '[');
      if (next == '[') {
        read_numbers(depth_left - 1, limit);
        continue;
      }
      if (next != '-' && (next < '0' || next > '9'))
        bad("input data must be a (nested) list of JSON numbers (NaN and Inf are refused on every path)");
      if (out_.data.size() >= limit) {
        if (!has_shape_ && limit == limits_.max_tensor_bytes / sizeof(float))
          throw RequestTooLarge("input data holds more than " + std::to_string(limits_.max_tensor_bytes) +
                                " bytes of FP32 (the server's per-request limit)");
        bad("input data holds more values than its shape says");
      }
      out_.data.push_back(
          cursor_.read_float("input data (JSON numbers only: NaN and Inf are refused on every path)"));
    } while (cursor_.consume(','));
    cursor_.expect(']', "input data");
  }
  if (nesting_.size() <= depth) nesting_.resize(depth + 1);
  NestingLevel& level = nesting_[depth];
  if (!level.seen) {
    level = {true, length, holds_numbers.value_or(true)};
  } else if (level.length != length || level.holds_numbers != holds_numbers.value_or(true)) {
    bad("input data's lists at depth " + std::to_string(depth) + " differ (" + std::to_string(length) +
        " entries vs " + std::to_string(level.length) + "): ragged data has no shape");
  }
}

// Nested "data" against "shape": depth d holds shape[d] lists down to the innermost, which holds the product
// of the remaining dims (flat data: one list of every value; fully nested: one depth per dim).
void RequestReader::check_nesting() const {
  const std::vector<std::int64_t>& shape = out_.shape;
  if (nesting_.size() > shape.size())
    bad("input data is nested " + std::to_string(nesting_.size()) + " deep, its shape has " +
        std::to_string(shape.size()) + " dims");
  for (std::size_t depth = 0; depth < nesting_.size(); ++depth) {
    std::int64_t expected = shape[depth];
    if (depth + 1 == nesting_.size())
      for (std::size_t dim = depth + 1; dim < shape.size(); ++dim)
        expected *= shape[dim];
    if (static_cast<std::int64_t>(nesting_[depth].length) != expected)
      bad("input data's lists at depth " + std::to_string(depth) + " hold " +
          std::to_string(nesting_[depth].length) + " entries, its shape needs " + std::to_string(expected) +
          " there (nest it as the shape, row-major, or send it flat)");
  }
}

void RequestReader::finish(std::string_view binary_part, bool has_header_length) {
  if (input_name_.value_or("") != model_.input.name)
    bad("unknown input '" + input_name_.value_or("") + "': model '" + model_.name + "' takes '" +
        model_.input.name + "'");
  if (input_datatype_.value_or("") != model_.input.datatype)
    bad("input '" + model_.input.name + "' has datatype '" + input_datatype_.value_or("") + "', expected " +
        model_.input.datatype);
  if (!has_shape_) bad("input needs a \"shape\" list");
  if (binary_data_size_) {
    if (has_data_) bad("input '" + model_.input.name + "' has both \"data\" and binary_data_size");
    if (!has_header_length) bad("binary_data_size needs the Inference-Header-Content-Length header");
    if (*binary_data_size_ != element_count_ * 4)
      bad("binary_data_size " + std::to_string(*binary_data_size_) + " does not match shape (" +
          std::to_string(element_count_ * 4) + " bytes of FP32)");
    if (binary_part.size() != static_cast<std::size_t>(*binary_data_size_))
      bad("binary body holds " + std::to_string(binary_part.size()) + " bytes, binary_data_size says " +
          std::to_string(*binary_data_size_));
    out_.data.resize(static_cast<std::size_t>(element_count_));
    std::memcpy(out_.data.data(), binary_part.data(), binary_part.size());  // little-endian
    for (std::size_t index = 0; index < out_.data.size(); ++index)
      if (!std::isfinite(out_.data[index]))
        bad("binary input holds a NaN or Inf at element " + std::to_string(index) +
            " (refused on every path, as in JSON)");
    return;
  }
  if (!has_data_) bad("input '" + model_.input.name + "' has neither \"data\" nor binary_data_size");
  if (static_cast<std::int64_t>(out_.data.size()) != element_count_)
    bad("input data holds " + std::to_string(out_.data.size()) + " values, shape needs " +
        std::to_string(element_count_));
  check_nesting();
}

}  // namespace

InferRequest parse_infer_request(std::string_view body, std::optional<std::size_t> header_length,
                                 const ModelConfig& model, const RequestLimits& limits) {
  if (header_length && *header_length > body.size())
    bad("Inference-Header-Content-Length " + std::to_string(*header_length) + " exceeds the body (" +
        std::to_string(body.size()) + " bytes)");
  const std::size_t json_length = header_length ? *header_length : body.size();
  InferRequest parsed;
  RequestReader reader(body.substr(0, json_length), model, limits, parsed);
  try {
    reader.read_body();
  } catch (const Json::exception& error) {  // cannot happen after the cursor's checks; kept as a 400
    bad(std::string("request body is not valid JSON: ") + error.what());
  } catch (const Error& error) {  // where the JSON part ends is the client's header: say so
    if (error.category() != ErrorCategory::invalid_input) throw;
    if (header_length) {
      // the header is to blame only where its length cut the JSON wrong (not for a valid request refused on
      // its merits: a batch above max_batch_size)
      const std::string_view json_part = body.substr(0, json_length);
      if (!Json::accept(json_part.begin(), json_part.end()))
        bad(std::string(error.what()) + " (the JSON part is the body's first " + std::to_string(json_length) +
            " bytes, as Inference-Header-Content-Length says: is that header right?)");
      throw;
    }
    const bool control_bytes = std::any_of(body.begin(), body.end(), [](char byte) {
      return static_cast<unsigned char>(byte) < 0x20 && byte != '\n' && byte != '\r' && byte != '\t';
    });
    if (control_bytes)
      bad(std::string(error.what()) +
          " (a body with binary tensor data needs the Inference-Header-Content-Length header)");
    throw;
  }
  reader.finish(body.substr(json_length), header_length.has_value());
  return parsed;
}

EncodedResponse encode_infer_response(const ModelConfig& model, const std::string& version,
                                      const InferRequest& request, const std::vector<std::int64_t>& shape,
                                      const std::vector<float>& values, const ResponseEnergy& energy) {
  Json response;
  response["model_name"] = model.name;
  response["model_version"] = version;
  if (request.id) response["id"] = *request.id;
  if (energy.source)
    response["parameters"] = {{"energy_j", energy.joules},
                              {"energy_source", energy::source_name(*energy.source)}};
  Json output = {{"name", model.output.name}, {"datatype", "FP32"}, {"shape", shape}};
  EncodedResponse encoded;
  if (request.binary_output) {
    output["parameters"] = {{"binary_data_size", values.size() * 4}};
    response["outputs"] = Json::array({output});
    encoded.body = response.dump(-1, ' ', false, Json::error_handler_t::replace);
    encoded.header_length = encoded.body.size();
    encoded.body.append(reinterpret_cast<const char*>(values.data()), values.size() * 4);
    encoded.content_type = "application/octet-stream";
  } else {
    output["data"] = values;
    response["outputs"] = Json::array({output});
    encoded.body = response.dump(-1, ' ', false, Json::error_handler_t::replace);
    encoded.content_type = "application/json";
  }
  return encoded;
}

}  // namespace ipj::serve
