#!/usr/bin/env bash
# Long fuzz runs of the KServe request parser (CTest runs a few seconds of the same oracle).
# With clang: builds build-fuzz/fuzz_request_parser with libFuzzer + AddressSanitizer + UBSan from the parser's
# sources and runs it for SECONDS with a KServe dictionary, seeded with valid requests; crashes and
# disagreements with nlohmann::json are written to build-fuzz/artifacts/. Without clang: runs the CTest
# generator (tests/serve/codec_fuzz_test.cpp) for SECONDS instead.
# Usage: scripts/fuzz_serve.sh [seconds=600] [jobs=1]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-600}"
jobs="${2:-1}"
if ! command -v clang++ > /dev/null; then
  echo "clang++ not found: running the structure-aware CTest fuzz for ${seconds}s instead" >&2
  IPJ_FUZZ_SECONDS="$seconds" IPJ_FUZZ_SEED="${IPJ_FUZZ_SEED:-$RANDOM}" \
    build/tests/ipj_serve_tests --gtest_filter='KserveCodecFuzz.*'
  exit
fi
out=build-fuzz
mkdir -p "$out/corpus" "$out/artifacts"
clang++ -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -Iinclude -Isrc/serve -Itests/serve \
  tests/serve/fuzz_request_parser.cpp src/serve/kserve_codec.cpp src/serve/bounded_json.cpp \
  src/serve/model_repository.cpp src/core/error.cpp src/core/json_io.cpp src/core/atomic_file.cpp \
  -o "$out/fuzz_request_parser"
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
