#!/usr/bin/env bash
# Formats ipj's C++ sources with clang-format (.clang-format at the root); --check only reports.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files --cached --others --exclude-standard '*.cpp' '*.hpp' 2>/dev/null || find include src apps tests bench -name '*.[ch]pp')
if [ "${1:-}" = "--check" ]; then
  clang-format --dry-run --Werror "${files[@]}"
  echo "format: ${#files[@]} files clean"
else
  clang-format -i "${files[@]}"
fi
