#!/usr/bin/env bash
# Compiles every library and CLI source with -DIPJ_WITH_CUDA=1 against Debian's LibTorch headers and a local
# CUDA toolkit, syntax only (-fsyntax-only: nothing links, nothing runs). Catches CUDA-only code that no longer
# compiles on machines without a CUDA LibTorch. Usage: bash scripts/cuda_syntax_check.sh [BUILD_DIR]
# Needs a configured build (scripts/build.sh) and CUDA headers (CUDA_HOME, default /usr/local/cuda*).
# IPJ_CUDA_CHECK_ONLY=REGEX checks only the sources whose path matches (e.g. 'src/train/|command_train'): the
# whole tree takes ~20 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${1:-build}"
cuda_home="${CUDA_HOME:-$(ls -d /usr/local/cuda* 2>/dev/null | sort -V | tail -1 || true)}"
if [[ -z "$cuda_home" || ! -f "$cuda_home/include/cuda_runtime_api.h" ]]; then
  echo "cuda_syntax_check: no CUDA toolkit headers found (set CUDA_HOME); skipped" >&2
  exit 0
fi
[[ -f "$build_dir/build.ninja" ]] || { echo "cuda_syntax_check: no build in '$build_dir' (run scripts/build.sh)" >&2; exit 2; }

# Debian's CPU LibTorch ships the c10/cuda headers but not the one CMake generates for CUDA builds.
shim="$(mktemp -d)"
trap 'rm -rf "$shim"' EXIT
mkdir -p "$shim/c10/cuda/impl"
printf '#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n' >"$shim/c10/cuda/impl/cuda_cmake_macros.h"

failures=0
checked=0
while IFS= read -r command; do
  source_file="${command##* -c }"
  case "$source_file" in */src/*.cpp | */apps/*.cpp) ;; *) continue ;; esac
  [[ -z "${IPJ_CUDA_CHECK_ONLY:-}" || "$source_file" =~ ${IPJ_CUDA_CHECK_ONLY} ]] || continue
  # Drop the launcher, the output and dependency-file arguments; compile for syntax only.
  compile="$(sed -E 's#^/usr/bin/ccache ##; s# -o [^ ]+# #; s# -MD##; s# -MT [^ ]+##; s# -MF [^ ]+##; s# -c [^ ]+$##' <<<"$command")"
  if ! $compile -DIPJ_WITH_CUDA=1 -isystem "$shim" -isystem "$cuda_home/include" -fsyntax-only "$source_file"; then
    echo "FAILED: $source_file" >&2
    failures=$((failures + 1))
  fi
  checked=$((checked + 1))
done < <(ninja -C "$build_dir" -t commands ipj 2>/dev/null | grep -E ' -c [^ ]+\.cpp$' | sort -u)

echo "cuda_syntax_check: $checked sources compiled with IPJ_WITH_CUDA=1 against $cuda_home, $failures failed"
[[ $failures -eq 0 ]]
