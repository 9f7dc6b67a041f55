// KServe v2 body parsing without HTTP: the fast numeric path agrees with the general JSON path, rejects what
// JSON rejects, and is not fooled by "data" keys elsewhere in the body.
#include <gtest/gtest.h>

#include "ipj/core/error.hpp"
#include "ipj/serve/kserve_codec.hpp"

namespace ipj::serve {
namespace {

ModelConfig two_by_two() {
  return parse_model_config(Json::parse(R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 2]}],
      "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 1]}], "max_batch_size": 8})"),
                            "m", "config.json");
}

InferRequest parse(const std::string& body) {
  return parse_infer_request(body, std::nullopt, two_by_two());
}

TEST(KserveCodec, NumbersInEveryJsonSpellingAndNesting) {
  const auto flat = parse(R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 2],
                              "data": [1, -2.5e-1, 3E2, 0.0]}]})");
  EXPECT_EQ(flat.data, (std::vector<float>{1.0f, -0.25f, 300.0f, 0.0f}));
  const auto nested = parse(R"({"id": "data", "parameters": {"data": [9, 9]}, "inputs": [{"name": "x",
                               "datatype": "FP32", "shape": [2, 2], "data": [[1, -0.25], [ 300 , 0 ]]}]})");
  EXPECT_EQ(nested.data, flat.data);
  EXPECT_EQ(nested.id, Json("data"));
}

TEST(KserveCodec, MalformedDataIsRejected) {
  for (const char* data :
       {"[1,,2,3]", "[1 2 3 4]", "[NaN, 1, 2, 3]", "[1, true, 2, 3]", "[1, 2, 3]", "[1, 2, 3, 4, 5]",
        "[\"1\", 2, 3, 4]", "[[1, 2], [3, 4]", "[0x10, 1, 2, 3]", "[1e99, 1, 2, 3]"}) {
    const std::string body =
        std::string(R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 2], "data": )") + data +
        "}]}";
    try {
      parse(body);
      ADD_FAILURE() << "accepted " << data;
    } catch (const Error& error) {
      EXPECT_EQ(error.category(), ErrorCategory::invalid_input) << data;
    }
  }
}

}  // namespace
}  // namespace ipj::serve
