#!/usr/bin/env bash
# Long fuzz runs of the KServe request parser and of model-repository config.json (CTest runs a few seconds of
# the same oracles).
# With clang: builds build-fuzz/fuzz_request_parser with libFuzzer + AddressSanitizer + UBSan from the parser's
# sources and runs it for SECONDS with a KServe dictionary, seeded with valid requests; crashes and
# disagreements with nlohmann::json are written to build-fuzz/artifacts/; then build-fuzz/fuzz_model_config
# (config.json: refused with ipj::Error or accepted with the config's invariants) for SECONDS more. Without
# clang: runs the CTest generators (tests/serve/codec_fuzz_test.cpp, config_fuzz_test.cpp) instead.
# Usage: scripts/fuzz_serve.sh [seconds=600] [jobs=1]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-600}"
jobs="${2:-1}"
if ! command -v clang++ > /dev/null; then
  echo "clang++ not found: running the structure-aware CTest fuzz for ${seconds}s instead" >&2
  IPJ_FUZZ_SECONDS="$seconds" IPJ_FUZZ_SEED="${IPJ_FUZZ_SEED:-$RANDOM}" \
    build/tests/ipj_serve_tests --gtest_filter='KserveCodecFuzz.*:ModelConfigFuzz.*'
  exit
fi
out=build-fuzz
mkdir -p "$out/corpus" "$out/artifacts"
clang++ -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -Iinclude -Isrc/serve -Itests/serve \
  tests/serve/fuzz_request_parser.cpp src/serve/kserve_codec.cpp src/serve/bounded_json.cpp \
  src/serve/model_repository.cpp src/core/error.cpp src/core/json_io.cpp src/core/atomic_file.cpp \
  src/core/checked_file.cpp -lxxhash -lspdlog -lfmt -o "$out/fuzz_request_parser"
clang++ -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -Iinclude tests/serve/fuzz_model_config.cpp \
  src/serve/model_repository.cpp src/core/error.cpp src/core/json_io.cpp src/core/atomic_file.cpp \
  src/core/checked_file.cpp -lxxhash -lspdlog -lfmt -o "$out/fuzz_model_config"
cat > "$out/kserve.dict" <<'DICT'
"\"inputs\""
"\"outputs\""
"\"id\""
"\"parameters\""
"\"name\""
"\"datatype\""
"\"shape\""
"\"data\""
"\"x\""
"\"FP32\""
"\"timeout\""
"\"binary_data\""
"\"binary_data_size\""
"\"binary_data_output\""
"\\u"
"1e39"
"-0"
"true"
"null"
DICT
echo '{"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 2], "data": [[1, 2], [3.5, -4e-3]]}]}' > "$out/corpus/seed1"
echo '{"id": "a\u00e9", "parameters": {"timeout": 100}, "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [0, 1]}], "outputs": [{"name": "y"}]}' > "$out/corpus/seed2"
"$out/fuzz_request_parser" -max_total_time="$seconds" -jobs="$jobs" -workers="$jobs" -max_len=4096 \
  -dict="$out/kserve.dict" -artifact_prefix="$out/artifacts/" "$out/corpus"
mkdir -p "$out/config-corpus"
echo '{"inputs": [{"name": "x", "shape": [-1, 3]}], "outputs": [{"name": "y", "shape": [-1, 2]}], "max_batch_size": 8, "dynamic_batching": {"preferred_batch_sizes": [4]}, "instance_group": [{"count": 2}], "mean": [0.5], "std": [0.25]}' > "$out/config-corpus/seed1"
"$out/fuzz_model_config" -max_total_time="$seconds" -jobs="$jobs" -workers="$jobs" -max_len=4096 \
  -artifact_prefix="$out/artifacts/config-" "$out/config-corpus"
