#!/usr/bin/env bash
# Builds inflight and runs the whole test suite (what CI runs): the file-format, tokenizer
# and kernel tests under ASan/UBSan first, then every test on the optimised build.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
jobs="$(nproc)"

cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DINFLIGHT_SANITIZE=address,undefined -DINFLIGHT_BUILD_BENCH=OFF >/dev/null
cmake --build build-asan -j "$jobs" --target gguf_test tokenizer_test kernels_test
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
for t in gguf_test tokenizer_test kernels_test; do
  echo "== $t (ASan/UBSan)"
  ./build-asan/tests/$t --gtest_brief=1
done

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure -j 2
