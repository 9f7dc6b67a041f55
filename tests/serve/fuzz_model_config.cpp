// libFuzzer entry point for model-repository config.json (built and run by scripts/fuzz_serve.sh, not by
// CTest; ModelConfigFuzz in config_fuzz_test.cpp runs a bounded generator in CTest): every input must be
// refused with ipj::Error or accepted with parse_model_config's invariants; any other exception aborts.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ipj/core/error.hpp"
#include "ipj/core/json_io.hpp"
#include "ipj/serve/model_repository.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const ipj::Json config = ipj::parse_json_text(text, "'config.json'", ipj::kConfigFileLimits);
    const ipj::serve::ModelConfig model = ipj::serve::parse_model_config(config, "m", "config.json");
    if (model.batching.max_batch_size < 0 || model.batching.instances < 1 || model.batching.instances > 64 ||
        model.input.shape.empty() || model.output.shape.empty() || model.mean.size() != model.std.size()) {
      std::fprintf(stderr, "accepted a config that breaks an invariant\n");
      std::abort();
    }
  } catch (const ipj::Error&) {
  }
  return 0;
}
