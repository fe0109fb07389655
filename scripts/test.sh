#!/usr/bin/env bash
# Builds inflight and runs the whole test suite (what CI runs): the file-format, tokenizer,
# chat-template, kernel, KV-cache, executor and server tests under ASan/UBSan, the engine loop and the HTTP
# server under TSan, the fuzz
# targets for a while, then every test on the optimised build (the tensor/pipeline-parallel tests
# there run under mpirun: Debian's Open MPI is not instrumented, so they stay out of the
# sanitizer builds; their arithmetic runs under both sanitizers in model_shard_test).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
jobs="$(nproc)"

cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DINFLIGHT_SANITIZE=address,undefined -DINFLIGHT_BUILD_BENCH=OFF >/dev/null
asan_tests="gguf_test tokenizer_test jinja_test kernels_test quant_formats_test block_manager_test scheduler_test executor_test speculative_test beam_search_test guided_test guided_decoding_test lora_test ptuning_test model_shard_test serving_test server_e2e_test server_limits_test openai_test control_plane_test security_test tools_e2e_test"
cmake --build build-asan -j "$jobs" --target $asan_tests inflight-server inflight-bench inflight-client inflight-model
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
for t in $asan_tests; do
  echo "== $t (ASan/UBSan)"
  ./build-asan/tests/$t --gtest_brief=1
done

cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DINFLIGHT_SANITIZE=thread -DINFLIGHT_BUILD_BENCH=OFF >/dev/null
cmake --build build-tsan -j "$jobs" --target executor_test speculative_test beam_search_test model_shard_test output_stream_test http_server_test
# The engine loop, the output stream, and the HTTP server's threads (plain and TLS) (Beast/Asio are header-only, so instrumented;
# Debian's protobuf and gRPC are not, and the serving core's tests crash inside them under TSan).
for t in executor_test speculative_test beam_search_test model_shard_test output_stream_test http_server_test; do
  echo "== $t (TSan)"
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 ./build-tsan/tests/$t --gtest_brief=1
done

echo "== fuzz targets (libFuzzer, ASan/UBSan), ${FUZZ_SECONDS:-30}s each"
FUZZ_SECONDS="${FUZZ_SECONDS:-30}" bash scripts/fuzz.sh

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DINFLIGHT_BENCH_IN_ALL=OFF >/dev/null
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure -j 2

# The soak and chaos run (issue 14): mixed KServe HTTP, gRPC and OpenAI load with disconnects,
# slow readers, cancels, bad requests, reloads and a SIGTERM; nothing lost, nothing leaked.
echo "== soak (${SOAK_SECONDS:-60} s)"
./build/bench/soak --server build/apps/inflight-server --model models/demo/inflight-demo-q8_0.gguf \
  --seconds "${SOAK_SECONDS:-60}" 2>/dev/null
