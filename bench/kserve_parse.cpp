// Cost of reading KServe v2 JSON request bodies (Google Benchmark): ipj's bounded reader
// (parse_infer_request) on 1x784 and 64x784 FP32 bodies and a nested 3x32x32 image, side by side with a
// simdjson On-Demand walk of the same bodies where libsimdjson-dev is installed (IPJ_BENCH_SIMDJSON), and
// both readers' peak memory on a 60 MB body. The simdjson walk reads only what a reader must (keys, name,
// datatype, shape, data, id): a lower bound for a simdjson-based reader, which would still need the depth,
// grammar and size checks it does not do (docs/SERVING.md).
#include <benchmark/benchmark.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "ipj/serve/kserve_codec.hpp"

#ifdef IPJ_BENCH_SIMDJSON
#include <simdjson.h>

#include <charconv>
#endif

namespace {

using ipj::Json;
using ipj::serve::InferRequest;
using ipj::serve::ModelConfig;

struct Case {
  const char* name;
  std::vector<std::int64_t> model_shape;  // the model's input shape (-1: the batch)
  std::vector<std::int64_t> shape;        // the request's shape
  bool nested;                            // data as nested lists (numpy's tolist()) or flat
};

const Case kCases[] = {{"1x784", {-1, 784}, {1, 784}, false},
                       {"64x784", {-1, 784}, {64, 784}, false},
                       {"image_3x32x32", {-1, 3, 32, 32}, {1, 3, 32, 32}, true}};

ModelConfig model_for(const Case& config) {
  return ipj::serve::parse_model_config(
      Json{{"inputs", {{{"name", "x"}, {"datatype", "FP32"}, {"shape", config.model_shape}}}},
           {"outputs", {{{"name", "y"}, {"datatype", "FP32"}, {"shape", {-1, 10}}}}},
           {"max_batch_size", 64}},
      "m", "config.json");
}

Json nest(const std::vector<float>& values, const std::vector<std::int64_t>& shape, std::size_t dim,
          std::size_t& at) {
  Json list = Json::array();
  for (std::int64_t index = 0; index < shape[dim]; ++index)
    list.push_back(dim + 1 == shape.size() ? Json(values[at++]) : nest(values, shape, dim + 1, at));
  return list;
}

// As `ipj load` writes them: uniform [0, 1) FP32 pixels, dumped by nlohmann::json (shortest round-trip text).
// The string keeps SIMDJSON_PADDING (64) spare bytes of capacity, as the server's request bodies do not.
std::string body_for(const Case& config) {
  std::int64_t count = 1;
  for (const std::int64_t dim : config.shape)
    count *= dim;
  std::mt19937 generator(7);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  std::vector<float> values(static_cast<std::size_t>(count));
  for (float& value : values)
    value = pixel(generator);
  std::size_t at = 0;
  const Json data = config.nested ? nest(values, config.shape, 0, at) : Json(values);
  const Json request = {
      {"id", "ipj-load"},
      {"inputs", {{{"name", "x"}, {"datatype", "FP32"}, {"shape", config.shape}, {"data", data}}}}};
  std::string body = request.dump();
  body.reserve(body.size() + 64);
  return body;
}

void ipj_reader(benchmark::State& state) {
  const Case& config = kCases[state.range(0)];
  const ModelConfig model = model_for(config);
  const std::string body = body_for(config);
  for (auto _ : state) {
    InferRequest parsed = ipj::serve::parse_infer_request(body, std::nullopt, model);
    benchmark::DoNotOptimize(parsed.data.data());
  }
  state.SetLabel(config.name);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * body.size()));
  state.counters["body_bytes"] = static_cast<double>(body.size());
}

#ifdef IPJ_BENCH_SIMDJSON
namespace od = simdjson::ondemand;

// get_double() rounded to FP32, exact as std::from_chars<float>: only a double that lands on an FP32 tie can
// round twice wrongly, and that case re-reads the text.
float to_fp32(od::value& value) {
  const std::string_view token = value.raw_json_token();
  const double wide = value.get_double();
  float narrow = static_cast<float>(wide);
  if (!std::isfinite(narrow)) throw std::runtime_error("outside the FP32 range");
  if (static_cast<double>(narrow) != wide) {
    const float other = std::nextafter(narrow, wide > narrow ? INFINITY : -INFINITY);
    if ((static_cast<double>(narrow) + static_cast<double>(other)) / 2 == wide) {
      const std::size_t end = token.find_last_not_of(" \t\r\n") + 1;
      std::from_chars(token.data(), token.data() + end, narrow);
    }
  }
  return narrow;
}

void walk_numbers(od::array array, int depth_left, std::vector<float>& out) {
  if (depth_left <= 0) throw std::runtime_error("nested too deeply");
  for (auto element : array) {
    od::value value = element.value();
    const od::json_type type = value.type();
    if (type == od::json_type::array)
      walk_numbers(value.get_array(), depth_left - 1, out);
    else
      out.push_back(to_fp32(value));
  }
}

InferRequest simdjson_read(od::parser& parser, const std::string& body) {
  InferRequest out;
  od::document document = parser.iterate(body.data(), body.size(), body.capacity());
  for (auto field : document.get_object()) {
    const std::string_view key = field.unescaped_key();
    if (key == "id") {
      const std::string_view text = field.value().raw_json_token();
      out.id = Json::parse(text.begin(), text.end());
    } else if (key == "inputs") {
      for (auto tensor : field.value().get_array()) {
        for (auto entry : tensor.get_object()) {
          const std::string_view name = entry.unescaped_key();
          if (name == "name" || name == "datatype") {
            benchmark::DoNotOptimize(std::string_view(entry.value().get_string()));
          } else if (name == "shape") {
            std::int64_t count = 1;
            for (auto dim : entry.value().get_array())
              count *= out.shape.emplace_back(dim.get_int64());
            out.data.reserve(static_cast<std::size_t>(count));
          } else if (name == "data") {
            walk_numbers(entry.value().get_array(), 32, out.data);
          }
        }
      }
    }
  }
  return out;
}

void simdjson_walk(benchmark::State& state) {
  const Case& config = kCases[state.range(0)];
  const std::string body = body_for(config);
  od::parser parser;
  for (auto _ : state) {
    InferRequest parsed = simdjson_read(parser, body);
    benchmark::DoNotOptimize(parsed.data.data());
  }
  state.SetLabel(config.name);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * body.size()));
  state.counters["body_bytes"] = static_cast<double>(body.size());
}
#endif

long status_kib(const char* key) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind(key, 0) == 0) return std::stol(line.substr(line.find(':') + 1));
  return -1;
}

// The 60 MB body of tests/serve/codec_test.cpp (8 x 1e6 values, a 32 MB tensor): peak RSS growth while
// reading it.
void peak_memory(benchmark::State& state, const std::function<std::size_t(const std::string&)>& read) {
  std::string body =
      R"({"id": "big", "inputs": [{"name": "x", "datatype": "FP32", "shape": [8, 1000000], "data": [)";
  body.reserve(62 << 20);
  for (int value = 0; value < 8000000; ++value)
    body += value ? ",0.1234" : "0.1234";
  body += "]}]}";
  body.reserve(body.size() + 64);
  long growth = 0;
  for (auto _ : state) {
    std::ofstream("/proc/self/clear_refs") << "5";  // resets VmHWM to the current RSS
    const long before = status_kib("VmRSS:");
    benchmark::DoNotOptimize(read(body));
    growth = status_kib("VmHWM:") - before;
  }
  state.counters["body_MiB"] = static_cast<double>(body.size()) / (1 << 20);
  state.counters["peak_growth_MiB"] = static_cast<double>(growth) / 1024;
}

ModelConfig wide_model() {
  return ipj::serve::parse_model_config(
      Json::parse(R"({"inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 1000000]}],
          "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 1]}], "max_batch_size": 16})"),
      "w", "config.json");
}

void register_all() {
  for (int index = 0; index < 3; ++index) {  // alternating per body, so both sides see the same machine state
    benchmark::RegisterBenchmark("ipj_reader", ipj_reader)->Arg(index);
#ifdef IPJ_BENCH_SIMDJSON
    benchmark::RegisterBenchmark("simdjson_ondemand_walk", simdjson_walk)->Arg(index);
#endif
  }
  benchmark::RegisterBenchmark("peak_memory_60MB/ipj_reader", [](benchmark::State& state) {
    const ModelConfig model = wide_model();
    peak_memory(state, [&](const std::string& body) {
      return ipj::serve::parse_infer_request(body, std::nullopt, model).data.size();
    });
  })->Iterations(1);
#ifdef IPJ_BENCH_SIMDJSON
  benchmark::RegisterBenchmark("peak_memory_60MB/simdjson_ondemand_walk", [](benchmark::State& state) {
    peak_memory(state, [](const std::string& body) {
      od::parser parser;  // a fresh parser: its structural index is part of the cost
      return simdjson_read(parser, body).data.size();
    });
  })->Iterations(1);
#endif
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
