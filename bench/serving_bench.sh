#!/usr/bin/env bash
# Serving benchmarks: inflight-bench against the real inflight-server on this machine, each
# figure a ratio of two runs made back to back in this script. Writes JSON per run under
# build/bench-results/ and prints a summary table (bench/README.md has the latest).
#   bash bench/serving_bench.sh                 # small Llama (dim 512, 8 layers, Q8_0), ~10 min
#   MODEL=path.gguf bash bench/serving_bench.sh # any GGUF
#   DECODE=1 bash bench/serving_bench.sh        # also single-stream decode vs the bandwidth
#                                               # limit on the TinyLlama-1.1B shape (~5 min more)
#   ONLY_DECODE=1 bash bench/serving_bench.sh   # just that
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target inflight-server inflight-bench inflight-model decode_bench >/dev/null
BIN=build/apps
SHARED="${INFLIGHT_SHARED_DIR:-../shared}"
TOKENIZER="$SHARED/models/tokenizers/llama2-sentencepiece/tokenizer.model"
mkdir -p build/bench-models build/bench-results build/bench-repos
MODEL="${MODEL:-build/bench-models/small-random-q8_0.gguf}"
if [ ! -f "$MODEL" ]; then
  "$BIN/inflight-model" make-random --arch llama --preset small --dtype q8_0 --tokenizer "$TOKENIZER" -o "$MODEL"
fi
OUT=build/bench-results
PORT=18500
SERVER_PID=""

serve() {  # serve NAME [init-repo flags...]: a fresh repository and server for one scenario
  local name=$1; shift
  stop
  "$BIN/inflight-server" init-repo --model "$MODEL" --out "build/bench-repos/$name" --force "$@" >/dev/null
  "$BIN/inflight-server" --model-repository "build/bench-repos/$name" --http-port $PORT --grpc-port $((PORT + 1)) \
    --metrics-port $((PORT + 2)) >"$OUT/$name.server.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 600); do
    curl -sf "localhost:$PORT/v2/health/ready" >/dev/null && return 0
    sleep 0.1
  done
  echo "server $name did not start" >&2; cat "$OUT/$name.server.log" >&2; exit 1
}
stop() { if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=""; fi; }
trap stop EXIT
bench() {  # bench NAME [inflight-bench flags...]
  local name=$1; shift
  "$BIN/inflight-bench" --no-progress --tokenizer "$MODEL" --json - "$@" >"$OUT/$name.json"
}

if [ "${ONLY_DECODE:-0}" != 1 ]; then
echo "== in-flight vs static batching (gRPC core model, 64 requests, Poisson)"
RATE="${RATE:-12}"
NORM=(token-norm-dist --input-mean 128 --input-stdev 32 --output-mean 128 --output-stdev 64)
serve inflight --max-num-tokens 512
bench ifb -i grpc --url localhost:$((PORT + 1)) -n 64 --seed 1 --request-rate "$RATE" "${NORM[@]}"
serve static --batching-strategy V1 --max-num-tokens 512
bench v1 -i grpc --url localhost:$((PORT + 1)) -n 64 --seed 1 --request-rate "$RATE" "${NORM[@]}"

echo "== chunked context on/off (20% 1024-token prompts among 32-token ones; p99 TTFT of the short ones)"
MIX=(token-norm-dist --input-mean 32 --input-stdev 0 --output-mean 64 --output-stdev 0 --long-fraction 0.2 --long-input-len 1024)
serve chunked --enable-chunked-context true --max-num-tokens 256
bench chunked_on --url localhost:$PORT -n 60 --seed 2 --request-rate "${MIX_RATE:-6}" --short-input-max 64 "${MIX[@]}"
# Without chunking a step must hold a whole prompt: max_num_tokens has to cover the longest.
serve unchunked --enable-chunked-context false --max-num-tokens 2048
bench chunked_off --url localhost:$PORT -n 60 --seed 2 --request-rate "${MIX_RATE:-6}" --short-input-max 64 "${MIX[@]}"

echo "== prefix reuse on/off (512-token shared prefix, one request at a time)"
PREFIX=(shared-prefix --prefix-len 512 --suffix-len 16 --output-len 16)
serve reuse --enable-kv-cache-reuse true
bench reuse_on --url localhost:$PORT -n 16 --warmup 1 --concurrency 1 "${PREFIX[@]}"
serve noreuse --enable-kv-cache-reuse false
bench reuse_off --url localhost:$PORT -n 16 --warmup 1 --concurrency 1 "${PREFIX[@]}"

echo "== throughput and p99 latency against concurrency"
serve sweep --max-num-tokens 512
"$BIN/inflight-bench" --no-progress --tokenizer "$MODEL" -i grpc --url localhost:$((PORT + 1)) -n 64 --seed 3 \
  --sweep-concurrency 1,2,4,8,16,32,64 --svg "$OUT/concurrency.svg" --json - \
  token-norm-dist --input-mean 128 --output-mean 64 >"$OUT/concurrency.json"
stop
fi

if [ "${DECODE:-0}" = 1 ] || [ "${ONLY_DECODE:-0}" = 1 ]; then
  echo "== single-stream decode through the server vs the memory-bandwidth limit (TinyLlama-1.1B shape, Q8_0)"
  (cd build && ./bench/decode_bench --dtype q8_0 --threads 2 --reps 1 --decode-tokens 16) | tee "$OUT/decode_bench.txt"
  MODEL="$(ls build/bench-models/*q8_0*.gguf | grep -i tinyllama | head -1)"
  serve decode
  bench decode -i grpc --url localhost:$((PORT + 1)) -n 3 --warmup 1 --concurrency 1 token-norm-dist --input-mean 128 --output-mean 64
  (cd build && ./bench/decode_bench --dtype q8_0 --threads 2 --reps 1 --decode-tokens 16) | tee -a "$OUT/decode_bench.txt"
  stop
fi

python3 - "$OUT" "${ONLY_DECODE:-0}" <<'PY'
import json, re, sys, os
out = sys.argv[1]
def j(n): return json.load(open(os.path.join(out, n + ".json")))
def summary():
  ifb, v1 = j("ifb"), j("v1")
  on, off = j("chunked_on"), j("chunked_off")
  ro, rf = j("reuse_on"), j("reuse_off")
  rows = [
    ("in-flight vs static: output tok/s", ifb["output_tokens_per_sec"], v1["output_tokens_per_sec"], "x"),
    ("in-flight vs static: mean TTFT (ms)", ifb["time_to_first_token_ms"]["avg"], v1["time_to_first_token_ms"]["avg"], "sooner"),
    ("in-flight vs static: p99 latency (ms)", ifb["latency_ms"]["p99"], v1["latency_ms"]["p99"], "sooner"),
    ("chunked on vs off: p99 TTFT of short prompts (ms)", on["short_request_time_to_first_token_ms"]["p99"], off["short_request_time_to_first_token_ms"]["p99"], "sooner"),
    ("chunked on vs off: output tok/s", on["output_tokens_per_sec"], off["output_tokens_per_sec"], "x"),
    ("prefix reuse on vs off: mean TTFT (ms)", ro["time_to_first_token_ms"]["avg"], rf["time_to_first_token_ms"]["avg"], "sooner"),
  ]
  print("| scenario | this | baseline | ratio |\n|---|---|---|---|")
  for name, a, b, kind in rows:
      ratio = a / b if kind == "x" else b / a
      print(f"| {name} | {a:.1f} | {b:.1f} | {ratio:.2f}x{' sooner' if kind == 'sooner' else ''} |")
  print("\n| clients | output tok/s | vs 1 client | p99 latency (ms) | p99 TTFT (ms) |\n|---|---|---|---|---|")
  sweep = j("concurrency")
  base = sweep[0]["output_tokens_per_sec"]
  for r in sweep:
      print(f"| {r['concurrency']} | {r['output_tokens_per_sec']:.1f} | {r['output_tokens_per_sec']/base:.2f}x | {r['latency_ms']['p99']:.0f} | {r['time_to_first_token_ms']['p99']:.0f} |")
if sys.argv[2] != "1":
  summary()
if os.path.exists(os.path.join(out, "decode.json")):
    d = j("decode")
    txt = open(os.path.join(out, "decode_bench.txt")).read()
    gb = float(re.search(r"([0-9.]+) GB read per decoded token", txt).group(1))
    bws = [float(x) for x in re.findall(r"^\d+\s+([0-9.]+) GB/s", txt, re.M)]
    tps = 1000.0 / d["inter_token_latency_ms"]["avg"]
    for bw in bws:
        print(f"\nserver decode {tps:.1f} tok/s (1 client, mean inter-token latency) vs limit {bw/gb:.1f} tok/s "
              f"({bw:.1f} GB/s / {gb:.2f} GB per token): {100*tps/(bw/gb):.0f}%")
PY
