#!/usr/bin/env bash
# Connection-scale benchmarks of inflight-server's HTTP side on the bundled demo model
# (bench/README.md has the latest figures), each against a baseline measured in the same run:
#   10,000 idle keep-alive connections -> health latency; 1,000 slowloris connections ->
#   health latency; 2,000 concurrent SSE streams and 1,000 concurrent OpenAI chat streams ->
#   all complete, RSS; output tok/s at 16 vs 64 closed-loop clients (inflight-bench);
#   engine-thread time outside the forward pass per step with 256 concurrent streams (the
#   server's inflight_engine_* counters).
#   bash bench/connections_bench.sh      # ~3 min
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target inflight-server inflight-bench connections_bench >/dev/null
BIN=build/apps
MODEL=models/demo/inflight-demo-q8_0.gguf
OUT=build/bench-results
PORT=18600
mkdir -p "$OUT" build/bench-repos
"$BIN/inflight-server" init-repo --model "$MODEL" --out build/bench-repos/connections --force >/dev/null
"$BIN/inflight-server" --model-repository build/bench-repos/connections --http-port $PORT --grpc-port $((PORT + 1)) \
  --metrics-port $((PORT + 2)) >"$OUT/connections.server.log" 2>&1 &
SERVER_PID=$!
trap 'kill $SERVER_PID 2>/dev/null || true; wait $SERVER_PID 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do curl -sf "localhost:$PORT/v2/health/ready" >/dev/null && break; sleep 0.1; done

echo "== idle keep-alive connections"
./build/bench/connections_bench --port $PORT --server-pid $SERVER_PID idle 10000
echo "== slowloris"
./build/bench/connections_bench --port $PORT --server-pid $SERVER_PID slowloris 1000
echo "== concurrent SSE streams"
./build/bench/connections_bench --port $PORT --server-pid $SERVER_PID --tokens 64 streams 2000
echo "== concurrent OpenAI chat streams"
./build/bench/connections_bench --port $PORT --server-pid $SERVER_PID --tokens 64 openai-streams 1000

counter() { curl -s "localhost:$((PORT + 2))/metrics" | awk -v n="$1" '$1 ~ "^"n"\\{" && /model="tensorrt_llm"/ {print $2}'; }
echo "== engine-thread time outside the forward pass, 256 concurrent streams"
s0=$(counter inflight_engine_step_seconds_total); f0=$(counter inflight_engine_forward_seconds_total); n0=$(counter inflight_engine_steps_total)
./build/bench/connections_bench --port $PORT --tokens 256 streams 256 >/dev/null || true
s1=$(counter inflight_engine_step_seconds_total); f1=$(counter inflight_engine_forward_seconds_total); n1=$(counter inflight_engine_steps_total)
python3 -c "
s=$s1-$s0; f=$f1-$f0; n=$n1-$n0
print(f'{n:.0f} steps, {1e3*s/n:.3f} ms per step, {1e3*f/n:.3f} ms in the forward pass, outside it {1e3*(s-f)/n:.3f} ms = {100*(s-f)/s:.2f}% of the step')"

echo "== output tokens/s, closed loop, 16 vs 64 clients"
for c in 16 64; do
  "$BIN/inflight-bench" --url 127.0.0.1:$PORT --tokenizer "$MODEL" -n 256 --concurrency $c --json "$OUT/connections-c$c.json" \
    token-norm-dist --input-mean 128 --input-stdev 16 --output-mean 128 --output-stdev 16 >/dev/null
  python3 -c "import json; j=json.load(open('$OUT/connections-c$c.json')); print('$c clients:', round(j['output_tokens_per_sec'], 1), 'output tok/s,', j['succeeded'], 'succeeded,', j['errors'], 'errors')"
done
