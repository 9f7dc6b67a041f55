// A bounded fuzz of model-repository config.json files (issue 22): valid configs mutated (truncated, edited,
// spliced, nested thousands deep, values swapped for odd ones, padded past the size limit), each written to a
// real repository and read by read_model_repository. The oracle: a config is accepted only when nlohmann
// parses it within the limits and the result keeps parse_model_config's invariants, else refused with
// ipj::Error naming the file; never another exception, a crash or a slow case. A few seconds in CI;
// IPJ_FUZZ_SECONDS / IPJ_FUZZ_SEED for longer runs (scripts/fuzz_serve.sh runs the tests named *Fuzz.*).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "ipj/core/error.hpp"
#include "ipj/quant/quantized_program.hpp"
#include "ipj/serve/model_repository.hpp"
#include "support/test_support.hpp"

namespace ipj::serve {
namespace {

const char* const kSeeds[] = {
    R"({"inputs": [{"name": "input__0", "datatype": "FP32", "shape": [-1, 1, 28, 28]}],
  "outputs": [{"name": "output__0", "datatype": "FP32", "shape": [-1, 10]}], "max_batch_size": 16,
  "dynamic_batching": {"preferred_batch_sizes": [4, 16], "max_queue_delay_us": 1000, "max_queue_size": 256}})",
    R"({"name": "mlp", "input": [{"name": "x", "dims": [1, 28, 28]}], "output": [{"name": "y", "dims": [10]}]})",
    R"({"inputs": [{"name": "x", "shape": [-1, 3]}], "outputs": [{"name": "y", "shape": [-1, 2]}],
  "max_batch_size": 8, "instance_group": [{"count": 2}], "mean": [0.5], "std": [0.25], "variant": "fp32",
  "energy_in_response": false, "dynamic_batching": {"max_queue_delay_microseconds": 50}, "engine": "auto"})",
};

class ConfigMutator {
 public:
  explicit ConfigMutator(std::uint32_t seed) : random_(seed) {}

  std::string next() {
    std::string text = kSeeds[pick(sizeof kSeeds / sizeof *kSeeds)];
    for (int round = 0, rounds = 1 + static_cast<int>(pick(3)); round < rounds; ++round)
      mutate(text);
    return text;
  }

 private:
  std::size_t pick(std::size_t count) { return count == 0 ? 0 : random_() % count; }

  void mutate(std::string& text) {
    static const char* const values[] = {"\"x\"",
                                         "-1",
                                         "1e400",
                                         "18446744073709551615",
                                         "9223372036854775808",
                                         "[]",
                                         "{}",
                                         "null",
                                         "true",
                                         "65",
                                         "0",
                                         "[-1]",
                                         "[[1]]",
                                         "[\"a\"]",
                                         "1.5",
                                         "\"\\u0000\"",
                                         "[1e308, -1e308]",
                                         "{\"count\": 999}"};
    switch (pick(9)) {
      case 0:
        text.resize(pick(text.size() + 1));
        break;
      case 1:
        for (int edit = 0, edits = 1 + static_cast<int>(pick(4)); edit < edits && !text.empty(); ++edit)
          text[pick(text.size())] = "{}[]\",:-.eE0123456789\\ \x01\xffu"[pick(27)];
        break;
      case 2:
        text.insert(pick(text.size() + 1), text.substr(pick(text.size() + 1), pick(60)));
        break;
      case 3: {  // nesting: mostly past the limit (up to 200,000 levels), sometimes within it
        const std::size_t levels = pick(2) ? 1 + pick(30) : 1 + pick(200000);
        const std::string opener = pick(2) ? "[" : "{\"a\":";
        const std::size_t at = text.find(':', pick(text.size() + 1));
        std::string nested;
        for (std::size_t level = 0; level < levels; ++level)
          nested += opener;
        nested += "1";
        for (std::size_t level = 0; level < levels; ++level)
          nested += opener == "[" ? ']' : '}';
        text.insert(at == std::string::npos ? 0 : at + 1, nested);
        break;
      }
      case 4:
      case 5: {  // a value swapped for an odd one
        const std::size_t colon = text.find(':', pick(text.size() + 1));
        if (colon == std::string::npos) break;
        const std::size_t end = text.find_first_of(",}", colon + 1);
        text.replace(colon + 1, (end == std::string::npos ? text.size() : end) - colon - 1,
                     values[pick(sizeof values / sizeof *values)]);
        break;
      }
      case 6:
        if (pick(20) == 0) text += std::string((std::size_t{1} << 20) + pick(100), ' ');  // past 1 MiB
        break;
      default:
        break;
    }
  }

  std::mt19937 random_;
};

int json_depth(const std::string& text) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (std::size_t at = 0; at < text.size(); ++at) {
    const char c = text[at];
    if (in_string) {
      if (c == '\\')
        ++at;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

TEST(ModelConfigFuzz, MutatedConfigsAreRefusedNamingTheFileOrKeepTheInvariants) {
  const char* configured = std::getenv("IPJ_FUZZ_SECONDS");
  const double budget_s = configured ? std::atof(configured) : 3.0;
  const std::uint32_t seed = std::getenv("IPJ_FUZZ_SEED")
                                 ? static_cast<std::uint32_t>(std::atoi(std::getenv("IPJ_FUZZ_SEED")))
                                 : 20261222u;
  ConfigMutator mutator(seed);
  testing::TempDir repository;
  const std::string config_path = repository.file("mlp/config.json");
  std::filesystem::create_directories(repository.file("mlp/1"));
  std::ofstream(repository.file("mlp/1/model.pt")) << "never loaded";
  const auto start = std::chrono::steady_clock::now();
  int accepted = 0, refused = 0;
  for (int iteration = 0;; ++iteration) {
    if (iteration % 32 == 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > budget_s)
      break;
    const std::string text = mutator.next();
    { std::ofstream(config_path, std::ios::trunc) << text; }
    const auto case_start = std::chrono::steady_clock::now();
    try {
      const std::vector<ModelConfig> models = read_model_repository(repository.path());
      ++accepted;
      ASSERT_EQ(models.size(), 1u);
      const ModelConfig& model = models[0];
      ASSERT_LE(text.size(), std::size_t{1} << 20) << text.substr(0, 200);
      ASSERT_LE(json_depth(text), 32) << text.substr(0, 200);
      ASSERT_NO_THROW(Json::parse(text)) << text.substr(0, 200);
      EXPECT_GE(model.batching.max_batch_size, 0);
      EXPECT_TRUE(model.batching.instances >= 1 && model.batching.instances <= 64);
      EXPECT_FALSE(model.input.shape.empty());
      EXPECT_FALSE(model.output.shape.empty());
      EXPECT_EQ(model.mean.size(), model.std.size());
      for (const float value : model.std)  // the CLI's --std rule: no division by 0, no sign flip
        EXPECT_TRUE(value > 0.0f && std::isfinite(value)) << text.substr(0, 200);
      EXPECT_EQ(model.versions, std::vector<std::string>{"1"});
      const std::vector<std::string> engines = quant::available_quantized_engines();
      EXPECT_TRUE(model.engine == "auto" ||
                  std::find(engines.begin(), engines.end(), model.engine) != engines.end())
          << model.engine;
    } catch (const Error& error) {
      ++refused;
      ASSERT_EQ(error.category(), ErrorCategory::invalid_input) << error.what() << "\n"
                                                                << text.substr(0, 200);
      ASSERT_NE(std::string(error.what()).find(config_path), std::string::npos) << error.what() << "\n"
                                                                                << text.substr(0, 200);
    } catch (const std::exception& error) {
      FAIL() << "escaped as " << error.what() << "\n" << text.substr(0, 400);
    }
    ASSERT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - case_start).count(), 1.0)
        << text.substr(0, 200);
  }
  // The mutator must reach both sides, or the fuzz tests nothing (shares: the count depends on the machine).
  EXPECT_GT(accepted + refused, 200);
  EXPECT_GT(accepted, (accepted + refused) / 20);
  EXPECT_GT(refused, (accepted + refused) / 4);
  std::printf("config fuzz: %d accepted, %d refused (seed %u)\n", accepted, refused, seed);
}

// A std of 0, below 0 or not finite divides every request by nothing useful: refused at start naming the
// file.
TEST(ModelConfigFuzz, AStdThatIsNotPositiveIsRefusedNamingTheFile) {
  testing::TempDir repository;
  std::filesystem::create_directories(repository.file("m/1"));
  std::ofstream(repository.file("m/1/model.pt")) << "never loaded";
  for (const std::string std_value : {"0", "-1", "1e39"}) {
    std::ofstream(repository.file("m/config.json"), std::ios::trunc)
        << R"({"name": "m", "input": [{"name": "x", "dims": [5]}], "output": [{"name": "y", "dims": [3]}], )"
        << R"("mean": [0.5], "std": [)" << std_value << "]}";
    try {
      read_model_repository(repository.path());
      ADD_FAILURE() << "std " << std_value << " accepted";
    } catch (const Error& error) {
      EXPECT_EQ(error.category(), ErrorCategory::invalid_input);
      EXPECT_NE(std::string(error.what()).find("\"std\" values must be finite and > 0"), std::string::npos)
          << error.what();
      EXPECT_NE(std::string(error.what()).find(repository.file("m/config.json")), std::string::npos)
          << error.what();
    }
  }
}

}  // namespace ipj::serve
