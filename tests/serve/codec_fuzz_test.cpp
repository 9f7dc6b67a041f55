// A bounded structure-aware fuzz of the KServe request parser: random requests built from the protocol's keys
// (valid, mutated, truncated, deeply nested, with odd numbers and escapes), checked against nlohmann::json as
// an oracle: the parser either refuses with ipj::Error, or accepts a body nlohmann also accepts, with the
// same values. A few seconds in CI; IPJ_FUZZ_SECONDS=600 (scripts/fuzz_serve.sh) for longer runs.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <random>

#include "ipj/core/error.hpp"
#include "ipj/serve/kserve_codec.hpp"
#include "request_fuzz_oracle.hpp"

namespace ipj::serve {
namespace {

class RequestGenerator {
 public:
  explicit RequestGenerator(std::uint32_t seed) : random_(seed) {}

  std::string next() {
    std::string body = request();
    switch (pick(8)) {  // some bodies are damaged on purpose
      case 0:
        body.resize(pick(body.size() + 1));
        break;
      case 1:
        for (int edit = 0, edits = 1 + static_cast<int>(pick(4)); edit < edits && !body.empty(); ++edit)
          body[pick(body.size())] = "{}[]\",:-.eE0\\ \x01\xffu"[pick(17)];
        break;
      case 2: {
        const std::size_t at = pick(body.size() + 1);
        body.insert(at, body.substr(pick(body.size() + 1), pick(40)));
        break;
      }
      default:
        break;
    }
    return body;
  }

 private:
  std::size_t pick(std::size_t count) { return count == 0 ? 0 : random_() % count; }

  std::string number() {
    static const char* const special[] = {"0",        "-0",           "1e-400",
                                          "1e39",     "3.4028235e38", "-3.5e38",
                                          "0.1",      "1E+2",         "123456789012345678901234567890",
                                          "01",       "1.",           ".5",
                                          "-",        "1e",           "NaN",
                                          "Infinity", "2.5e-45",      "-1.17549435e-38"};
    if (pick(4) == 0) return special[pick(sizeof special / sizeof *special)];
    std::uniform_real_distribution<double> value(-1e3, 1e3);
    char text[40];
    std::snprintf(text, sizeof text, pick(2) ? "%.6g" : "%.17g", value(random_));
    return text;
  }

  std::string string_value() {
    static const char* const pieces[] = {"a",        "x",       "input",          "\\\"",    "\\\\",
                                         "\\n",      "\\u00e9", "\\ud83d\\ude00", "\\ud800", "\\u12",
                                         "\xc3\xa9", "\x01",    "FP32",           "data",    "shape"};
    std::string text = "\"";
    for (std::size_t count = pick(5); count > 0; --count)
      text += pieces[pick(sizeof pieces / sizeof *pieces)];
    return text + "\"";
  }

  std::string value(int depth) {
    switch (depth > 6 ? pick(4) : pick(7)) {
      case 0:
        return number();
      case 1:
        return string_value();
      case 2:
        return pick(2) ? "true" : "null";
      case 3:
        return pick(2) ? "false" : "[]";
      case 4: {
        std::string text = "[";
        for (std::size_t count = pick(4); count > 0; --count)
          text += value(depth + 1) + (count > 1 ? "," : "");
        return text + "]";
      }
      case 5: {
        std::string text = "{";
        for (std::size_t count = pick(3); count > 0; --count)
          text += string_value() + ":" + value(depth + 1) + (count > 1 ? "," : "");
        return text + "}";
      }
      default:
        return std::string(pick(3) ? 1 + pick(40) : 2000 + pick(100000), '[') + "1" +
               std::string(1 + pick(50), ']');
    }
  }

  std::string data(const std::vector<int>& shape, std::size_t dim) {
    if (dim == shape.size()) return number();
    std::string text = "[";
    const int count = pick(10) ? shape[dim] : shape[dim] + static_cast<int>(pick(3)) - 1;
    for (int index = 0; index < count; ++index)
      text += (index ? "," : "") + data(shape, dim + 1);
    return text + "]";
  }

  std::string request() {
    std::vector<int> shape{1 + static_cast<int>(pick(3)), 2};  // the model: [-1, 2], max_batch_size 8
    if (pick(8) == 0) shape[1] = static_cast<int>(pick(4));
    std::vector<std::string> fields;
    fields.push_back(R"("name": )" + (pick(10) ? std::string("\"x\"") : value(0)));
    fields.push_back(R"("datatype": )" + (pick(10) ? std::string("\"FP32\"") : string_value()));
    std::string shape_text = "[";
    for (std::size_t dim = 0; dim < shape.size(); ++dim)
      shape_text += (dim ? ", " : "") + std::to_string(shape[dim]);
    fields.push_back(R"("shape": )" + (pick(12) ? shape_text + "]" : value(0)));
    fields.push_back(R"("data": )" +
                     (pick(12) ? (pick(2) ? data(shape, 0) : data({shape[0] * shape[1]}, 0)) : value(0)));
    if (pick(6) == 0) fields.push_back(R"("parameters": )" + value(0));
    std::shuffle(fields.begin(), fields.end(), random_);
    std::string tensor = "{";
    for (std::size_t index = 0; index < fields.size(); ++index)
      tensor += (index ? ", " : "") + fields[index];
    tensor += "}";
    std::vector<std::string> top{R"("inputs": [)" + tensor + (pick(15) ? "]" : ", " + tensor + "]")};
    if (pick(3) == 0) top.push_back(R"("id": )" + value(0));
    if (pick(4) == 0) top.push_back(R"("parameters": {"timeout": )" + number() + "}");
    if (pick(5) == 0)
      top.push_back(R"("outputs": [{"name": "y", "parameters": {"binary_data": )" + value(4) + "}}]");
    if (pick(6) == 0) top.push_back(string_value() + ": " + value(0));
    std::shuffle(top.begin(), top.end(), random_);
    std::string body = "{";
    for (std::size_t index = 0; index < top.size(); ++index)
      body += (index ? ", " : "") + top[index];
    return body + "}";
  }

  std::mt19937 random_;
};

TEST(KserveCodecFuzz, RandomRequestsAreRefusedCleanlyOrMatchTheJsonOracle) {
  const char* configured = std::getenv("IPJ_FUZZ_SECONDS");
  const double budget_s = configured ? std::atof(configured) : 3.0;
  const std::uint32_t seed = std::getenv("IPJ_FUZZ_SEED")
                                 ? static_cast<std::uint32_t>(std::atoi(std::getenv("IPJ_FUZZ_SEED")))
                                 : 20261203u;
  RequestGenerator generator(seed);
  const ModelConfig model = testing::fuzz_model();
  const auto start = std::chrono::steady_clock::now();
  int accepted = 0, refused = 0;
  for (int iteration = 0;; ++iteration) {
    if (iteration % 64 == 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > budget_s)
      break;
    const std::string body = generator.next();
    const testing::OracleVerdict verdict = testing::check_against_oracle(body, model);
    ASSERT_TRUE(verdict.consistent) << verdict.problem << "\nbody: " << body.substr(0, 400);
    (verdict.accepted ? accepted : refused) += 1;
  }
  // The generator must reach both sides, or the fuzz tests nothing.
  EXPECT_GT(accepted, 100);
  EXPECT_GT(refused, 100);
  std::printf("fuzz: %d accepted, %d refused (seed %u)\n", accepted, refused, seed);
}

}  // namespace
}  // namespace ipj::serve
