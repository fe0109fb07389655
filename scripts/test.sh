#!/usr/bin/env bash
# Builds inflight and runs the whole test suite (what CI runs), in timed stages whose table is
# printed at the end:
# - format: every C++ line as clang-format writes it (scripts/check-format.sh);
# - the file-format, tokenizer, chat-template, kernel, KV-cache, executor and server tests under
#   ASan/UBSan; the engine loop, output streams and the HTTP server's threads under TSan;
# - the fuzz targets for a while (scripts/fuzz.sh), built in the ASan tree (clang);
# - every test on the optimised build, the layer check among them (the tensor/pipeline-parallel
#   tests run under mpirun there: Debian's Open MPI is not instrumented, so they stay out of the
#   sanitizer builds; their arithmetic runs under both sanitizers in model_shard_test);
# - the soak and chaos run of the real server.
# Compiles go through ccache when it is installed (scripts/ccache-env.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/stages.sh
source scripts/ccache-env.sh
jobs="$(nproc)"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

stage install-deps bash scripts/install-deps.sh
stage format bash scripts/check-format.sh

asan_tests="gguf_test disaggregated_test disaggregated_server_test model_families_test moe_reference_test tokenizer_test jinja_test kernels_test quant_formats_test block_manager_test scheduler_test executor_test speculative_test lookahead_test medusa_test eagle_test beam_search_test guided_test guided_decoding_test lora_test ptuning_test model_shard_test tree_decoding_test serving_test server_e2e_test server_limits_test openai_test openai_agents_test kv_events_test kv_tiers_test kv_disk_test chat_output_test structural_tag_test control_plane_test security_test tools_e2e_test"
# One clang tree serves the ASan/UBSan tests and the fuzz targets (libFuzzer needs clang), so the
# libraries are compiled once for both.
fuzz_targets="gguf_fuzz safetensors_fuzz tokenizer_fuzz kserve_fuzz model_config_fuzz jinja_fuzz openai_fuzz guide_fuzz parallel_wire_fuzz kv_handoff_fuzz eagle_head_fuzz make_seeds"
asan_build() {
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
    "${CMAKE_LAUNCHER_ARGS[@]}" -DINFLIGHT_SANITIZE=address,undefined -DINFLIGHT_FUZZ=ON \
    -DINFLIGHT_BUILD_BENCH=OFF >/dev/null
  cmake --build build-asan -j "$jobs" --target $asan_tests inflight-server inflight-bench \
    inflight-client inflight-model $fuzz_targets
}
asan_run() {
  for t in $asan_tests; do
    echo "== $t (ASan/UBSan)"
    ./build-asan/tests/$t --gtest_brief=1
  done
}
stage asan-build asan_build
stage asan-tests asan_run

tsan_tests="executor_test disaggregated_test kv_disk_test speculative_test eagle_test beam_search_test model_shard_test output_stream_test http_server_test"
tsan_build() {
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${CMAKE_LAUNCHER_ARGS[@]}" \
    -DINFLIGHT_SANITIZE=thread -DINFLIGHT_BUILD_BENCH=OFF >/dev/null
  cmake --build build-tsan -j "$jobs" --target $tsan_tests
}
# The engine loop, the output stream, and the HTTP server's threads (plain and TLS)
# (Beast/Asio are header-only, so instrumented; Debian's protobuf and gRPC are not, and the
# serving core's tests crash inside them under TSan).
tsan_run() {
  for t in $tsan_tests; do
    echo "== $t (TSan)"
    TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 ./build-tsan/tests/$t --gtest_brief=1
  done
}
stage tsan-build tsan_build
stage tsan-tests tsan_run

export FUZZ_SECONDS="${FUZZ_SECONDS:-30}"
echo "fuzz targets (libFuzzer, ASan/UBSan): ${FUZZ_SECONDS}s each"
export FUZZ_BUILD_DIR=build-asan
stage fuzz bash scripts/fuzz.sh

release_build() {
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${CMAKE_LAUNCHER_ARGS[@]}" \
    -DINFLIGHT_BENCH_IN_ALL=OFF >/dev/null
  cmake --build build -j "$jobs"
}
stage release-build release_build
stage release-ctest ctest --test-dir build --output-on-failure --no-tests=error -j 2

# The soak and chaos run (issue 14): mixed KServe HTTP, gRPC and OpenAI load with disconnects,
# slow readers, cancels, bad requests, reloads and a SIGTERM; nothing lost, nothing leaked.
soak() {
  ./build/bench/soak --server build/apps/inflight-server \
    --model models/demo/inflight-demo-q8_0.gguf --seconds "${SOAK_SECONDS:-60}"
}
stage soak soak
