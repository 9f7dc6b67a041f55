// The oracle of the request-parser fuzzers (the CTest one and the libFuzzer one of scripts/fuzz_serve.sh):
// a body is either refused with ipj::Error, or accepted only if nlohmann::json accepts it too and reads the
// same shape, values, id and options. Header-only so the libFuzzer build needs no test library.
#pragma once

#include <cmath>
#include <exception>
#include <string>
#include <vector>

#include "ipj/core/error.hpp"
#include "ipj/serve/kserve_codec.hpp"

namespace ipj::testing {

inline serve::ModelConfig fuzz_model() {
  return serve::parse_model_config(
      Json::parse(R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 2]}],
          "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 1]}], "max_batch_size": 8})"),
      "m", "config.json");
}

struct OracleVerdict {
  bool consistent = true;
  bool accepted = false;
  std::string problem;
};

inline void flatten_numbers(const Json& value, std::vector<double>& out) {
  if (value.is_array()) {
    for (const Json& item : value)
      flatten_numbers(item, out);
  } else {
    out.push_back(value.is_number() ? value.get<double>() : std::nan(""));
  }
}

// Whether nested `data` fits `shape` from `dim` on: a list of numbers holds the product of the remaining
// dims, a list of lists holds shape[dim] lists that each fit from dim + 1; a list mixing the two fits
// nothing.
inline bool nesting_fits(const Json& data, const std::vector<std::int64_t>& shape, std::size_t dim = 0) {
  if (!data.is_array() || dim >= shape.size()) return false;
  bool lists = false, numbers = false;
  for (const Json& entry : data)
    (entry.is_array() ? lists : numbers) = true;
  if (lists && numbers) return false;
  if (!lists) {
    std::int64_t remaining = 1;
    for (std::size_t rest = dim; rest < shape.size(); ++rest)
      remaining *= shape[rest];
    return static_cast<std::int64_t>(data.size()) == remaining;
  }
  if (static_cast<std::int64_t>(data.size()) != shape[dim]) return false;
  for (const Json& entry : data)
    if (!nesting_fits(entry, shape, dim + 1)) return false;
  return true;
}

inline OracleVerdict check_against_oracle(const std::string& body, const serve::ModelConfig& model) {
  OracleVerdict verdict;
  serve::InferRequest parsed;
  try {
    parsed = serve::parse_infer_request(body, std::nullopt, model);
  } catch (const Error&) {
    return verdict;  // refused cleanly
  } catch (const std::exception& error) {
    verdict.consistent = false;
    verdict.problem = std::string("refused with a foreign exception: ") + error.what();
    return verdict;
  }
  verdict.accepted = true;
  auto disagree = [&](const std::string& problem) {
    verdict.consistent = false;
    verdict.problem = problem;
    return verdict;
  };
  // nlohmann recurses: only bodies the parser accepted (depth-limited) reach it.
  const Json reference = Json::parse(body, nullptr, false);
  if (reference.is_discarded()) return disagree("accepted a body that is not JSON");
  if (!reference.is_object() || !reference.contains("inputs") || reference["inputs"].size() != 1)
    return disagree("accepted a body without exactly one input");
  const Json& input = reference["inputs"][0];
  if (input.value("name", Json()) != "x" || input.value("datatype", Json()) != "FP32")
    return disagree("accepted a wrong name or datatype");
  if (input["shape"].get<std::vector<std::int64_t>>() != parsed.shape) return disagree("shape differs");
  if (!nesting_fits(input["data"], parsed.shape)) return disagree("accepted data nested unlike its shape");
  std::vector<double> expected;
  flatten_numbers(input["data"], expected);
  if (expected.size() != parsed.data.size()) return disagree("value count differs");
  for (std::size_t index = 0; index < expected.size(); ++index) {
    if (!std::isfinite(parsed.data[index])) return disagree("accepted a non-finite value");
    if (static_cast<float>(expected[index]) != parsed.data[index] &&
        std::fabs(expected[index] - parsed.data[index]) > 1e-6 * std::fabs(expected[index]))
      return disagree("value " + std::to_string(index) + " differs");
  }
  if (reference.contains("id") && (!parsed.id || *parsed.id != reference["id"]))
    return disagree("id differs");
  return verdict;
}

}  // namespace ipj::testing
