// libFuzzer entry point for the KServe request parser (built and run by scripts/fuzz_serve.sh, not by CTest):
// every input must be refused with ipj::Error or accepted consistently with nlohmann::json (the oracle).
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "request_fuzz_oracle.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const ipj::serve::ModelConfig model = ipj::testing::fuzz_model();
  const ipj::testing::OracleVerdict verdict =
      ipj::testing::check_against_oracle(std::string(reinterpret_cast<const char*>(data), size), model);
  if (!verdict.consistent) {
    std::fprintf(stderr, "parser disagrees with the oracle: %s\n", verdict.problem.c_str());
    std::abort();
  }
  return 0;
}
