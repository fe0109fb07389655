#!/usr/bin/env bash
# Fails on any C++ line of the tree that clang-format (the repository's .clang-format) would
# change, naming the file and line. `bash scripts/check-format.sh --fix` rewrites them instead.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files --cached --others --exclude-standard '*.cc' '*.h' | sort -u | while read -r f; do [ -f "$f" ] && echo "$f"; done)
if [ "${1:-}" = "--fix" ]; then
  clang-format -i --style=file "${files[@]}"
  exit 0
fi
if ! out=$(printf '%s\0' "${files[@]}" | xargs -0 -P "$(nproc)" -n 32 clang-format --dry-run --Werror --style=file 2>&1); then
  echo "$out" | grep -E '^[^ ].*(error|warning):' | head -50
  echo "check-format: these lines are not formatted; run: bash scripts/check-format.sh --fix" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files formatted"
