#!/usr/bin/env bash
# Builds the libFuzzer targets with clang + ASan/UBSan and runs each for FUZZ_SECONDS
# (default 30) from a seed corpus, one target per core. A crash, leak or sanitizer report fails
# the run. FUZZ_BUILD_DIR names a tree already configured with clang, -DINFLIGHT_FUZZ=ON and
# ASan/UBSan (scripts/test.sh passes its ASan tree, which builds the fuzz targets with the tests);
# by default the script configures build-fuzz itself.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${FUZZ_SECONDS:-30}"
build="${FUZZ_BUILD_DIR:-build-fuzz}"
source scripts/ccache-env.sh
if [ "$build" = build-fuzz ]; then
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
    "${CMAKE_LAUNCHER_ARGS[@]}" \
    -DINFLIGHT_FUZZ=ON -DINFLIGHT_SANITIZE=address,undefined -DINFLIGHT_BUILD_TESTS=OFF \
    -DINFLIGHT_BUILD_BENCH=OFF >/dev/null
fi
fuzz_targets="gguf_fuzz safetensors_fuzz tokenizer_fuzz kserve_fuzz model_config_fuzz jinja_fuzz openai_fuzz guide_fuzz parallel_wire_fuzz kv_handoff_fuzz eagle_head_fuzz make_seeds"
cmake --build "$build" -j "$(nproc)" --target $fuzz_targets
seeds="$build/seeds"
rm -rf "$seeds" && mkdir -p "$seeds"/{gguf,safetensors,tokenizer,parallel_wire,kv_handoff}
"./$build/fuzz/make_seeds" "$seeds"
mv "$seeds"/gguf-seed*.gguf "$seeds/gguf/"
mv "$seeds/seed.safetensors" "$seeds/safetensors/"
mv "$seeds/text-seed.txt" "$seeds/tokenizer/"
mv "$seeds/parallel-step-seed.bin" "$seeds/parallel_wire/"
mv "$seeds/kv-handoff-seed.bin" "$seeds/kv-handoff-shm-seed.bin" "$seeds/kv_handoff/"
cp -r fuzz/seeds/kserve fuzz/seeds/model_config fuzz/seeds/jinja fuzz/seeds/openai fuzz/seeds/guide \
  fuzz/seeds/eagle_head "$seeds/"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# One libFuzzer process per core: each target is single-threaded.
run_one() {
  local t="$1" log="$build/${1}_fuzz.log"
  if ! "./$build/fuzz/${t}_fuzz" -max_total_time="$seconds" -max_len=8192 -print_final_stats=1 \
      -artifact_prefix="$build/${t}-" "$seeds/$t" >"$log" 2>&1; then
    tail -40 "$log"
    echo "fuzz: ${t}_fuzz failed; the input is in $build/${t}-crash-*" >&2
    return 1
  fi
  echo "== ${t}_fuzz ran ${seconds}s: $(grep -E 'stat::(number_of_executed_units|new_units_added)' "$log" | awk '{print $1, $2}' | tr '\n' ' ')"
}
export -f run_one
export seeds seconds build
printf '%s\n' gguf safetensors tokenizer kserve model_config jinja openai guide parallel_wire kv_handoff \
  eagle_head |
  xargs -P "$(nproc)" -I{} bash -c 'run_one {}'
