#!/usr/bin/env bash
# Builds the libFuzzer targets with clang + ASan/UBSan and runs each for FUZZ_SECONDS
# (default 30) from a seed corpus. A crash, leak or sanitizer report fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${FUZZ_SECONDS:-30}"
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  -DINFLIGHT_FUZZ=ON -DINFLIGHT_SANITIZE=address,undefined -DINFLIGHT_BUILD_TESTS=OFF \
  -DINFLIGHT_BUILD_BENCH=OFF >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target gguf_fuzz safetensors_fuzz tokenizer_fuzz kserve_fuzz model_config_fuzz jinja_fuzz openai_fuzz guide_fuzz parallel_wire_fuzz make_seeds
seeds=build-fuzz/seeds
rm -rf "$seeds" && mkdir -p "$seeds"/{gguf,safetensors,tokenizer,parallel_wire}
./build-fuzz/fuzz/make_seeds "$seeds"
mv "$seeds/gguf-seed.gguf" "$seeds/gguf/"
mv "$seeds/seed.safetensors" "$seeds/safetensors/"
mv "$seeds/text-seed.txt" "$seeds/tokenizer/"
mv "$seeds/parallel-step-seed.bin" "$seeds/parallel_wire/"
cp -r fuzz/seeds/kserve fuzz/seeds/model_config fuzz/seeds/jinja fuzz/seeds/openai fuzz/seeds/guide "$seeds/"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
for t in gguf safetensors tokenizer kserve model_config jinja openai guide parallel_wire; do
  echo "== ${t}_fuzz for ${seconds}s"
  log="build-fuzz/${t}_fuzz.log"
  if ! ./build-fuzz/fuzz/${t}_fuzz -max_total_time="$seconds" -max_len=8192 -print_final_stats=1 \
      -artifact_prefix=build-fuzz/ "$seeds/$t" >"$log" 2>&1; then
    tail -40 "$log"
    echo "fuzz: ${t}_fuzz failed; the input is in build-fuzz/crash-*" >&2
    exit 1
  fi
  grep -E "stat::(number_of_executed_units|new_units_added)" "$log" || true
done
