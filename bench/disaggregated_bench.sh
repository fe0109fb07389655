#!/usr/bin/env bash
# Disaggregated against aggregated serving under a mixed load: 30% 1024-token prompts among
# 128-token ones, 128 generated tokens each, Poisson arrivals (inflight-bench over gRPC, token
# ids). The same two cores serve both ways:
#   aggregated    one server, 2 compute threads;
#   disagg-lo     a context server and a generation server (1 thread each, pinned to a core
#                 each) behind a router server (init-repo --disaggregated-*-url), all over
#                 loopback TCP, the K/V inline in the gRPC responses (through the router);
#   disagg-shm    the same with the K/V in shared-memory segments (--disaggregated-transport
#                 shm, the workers' --context-phase-shm-dir under /dev/shm): only a 48-byte
#                 descriptor goes through the router;
#   disagg-netns  the same with the generation server in a network namespace of its own,
#                 reached over a veth pair (root only; skipped otherwise).
# Prints TTFT p50/p99, inter-token latency p99 and the K/V transfer time per request (the
# generation server's nv_trt_llm_disaggregated_serving_metrics).
#   bash bench/disaggregated_bench.sh            # TinyLlama-1.1B shape, Q4_K_M, ~8 min
#   N=60 RATE=0.5 bash bench/disaggregated_bench.sh
#   ALONE_ONLY=1 bash bench/disaggregated_bench.sh   # only the transfer of one prompt alone, ~2 min
#   LAYOUTS="aggregated shm" bash bench/disaggregated_bench.sh   # some layouts only
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --build build --target inflight-server inflight-bench inflight-model >/dev/null
BIN=$PWD/build/apps
SHARED="${INFLIGHT_SHARED_DIR:-../shared}"
TOKENIZER="$SHARED/models/tokenizers/llama2-sentencepiece/tokenizer.model"
mkdir -p build/bench-models build/bench-results build/bench-repos
MODEL="${MODEL:-build/bench-models/tinyllama-1.1b-random-q4_k_m.gguf}"
[ -f "$MODEL" ] || "$BIN/inflight-model" make-random --arch llama --preset tinyllama-1.1b \
  --dtype q4_k_m --tokenizer "$TOKENIZER" -o "$MODEL" >/dev/null
OUT=build/bench-results
N="${N:-40}"
RATE="${RATE:-0.4}"
MIX=(token-norm-dist --input-mean 128 --input-stdev 0 --output-mean 128 --output-stdev 0
     --long-fraction 0.3 --long-input-len 1024)
LAYOUTS=" ${LAYOUTS:-aggregated lo shm netns} "
want() { [[ "$LAYOUTS" == *" $1 "* ]]; }
PIDS=()
SERVE_ARGS=()
NS=inflight-disagg-b
SHM_ROOT=/dev/shm/inflight-disagg-bench
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
  ip netns del $NS 2>/dev/null || true
  rm -rf "$SHM_ROOT"
}
trap cleanup EXIT

repo() {  # repo NAME THREADS [init-repo flags...]
  local name=$1 threads=$2; shift 2
  "$BIN/inflight-server" init-repo --model "$MODEL" --out "build/bench-repos/$name" --force \
    --max-num-tokens 256 "$@" >/dev/null
  if [ "$threads" -gt 0 ]; then
    printf 'parameters: {\n  key: "num_threads"\n  value: { string_value: "%s" }\n}\n' "$threads" \
      >>"build/bench-repos/$name/tensorrt_llm/config.pbtxt"
  fi
}
serve() {  # serve NAME PORT [command prefix...]: the server of repository NAME on PORT..PORT+2
  local name=$1 port=$2; shift 2
  "$@" "$BIN/inflight-server" --model-repository "build/bench-repos/$name" --http-port "$port" \
    --grpc-port $((port + 1)) --metrics-port $((port + 2)) ${SERVE_ARGS[@]+"${SERVE_ARGS[@]}"} \
    >"$OUT/disagg-$name.log" 2>&1 &
  PIDS+=($!)
}
ready() {  # ready HOST PORT
  for _ in $(seq 1 900); do
    curl -sf "$1:$2/v2/health/ready" >/dev/null && return 0
    sleep 0.1
  done
  echo "server at $1:$2 did not get ready" >&2; exit 1
}
transfer_ms() {  # transfer_ms HOST METRICS_PORT: "total_ms count" of the generation server
  curl -s "$1:$2/metrics" | awk '
    /^nv_trt_llm_disaggregated_serving_metrics/ && /kv_cache_transfer_ms/ {ms=$NF}
    /^nv_trt_llm_disaggregated_serving_metrics/ && /request_count/ {n=$NF}
    END {printf "%f %d", ms, n}'
}
alone() {  # alone NAME GRPC_PORT GEN_METRICS_HOST GEN_METRICS_PORT: one 1024-token prompt at a time
  read -r ms0 n0 <<<"$(transfer_ms "$3" "$4")"
  "$BIN/inflight-bench" --no-progress --vocab-size 32000 -i grpc --url "127.0.0.1:$2" -n 5 \
    --warmup 0 --seed 9 --concurrency 1 --json - token-norm-dist --input-mean 1024 --input-stdev 0 \
    --output-mean 2 --output-stdev 0 >"$OUT/disagg-$1-alone.json"
  read -r ms1 n1 <<<"$(transfer_ms "$3" "$4")"
  python3 - "$1" "$ms0" "$n0" "$ms1" "$n1" <<'PY'
import sys
name, ms0, n0, ms1, n1 = sys.argv[1], *map(float, sys.argv[2:])
n = int(n1 - n0)
print(f"{name:14s} alone: one 1024-token prompt's K/V transfer {(ms1 - ms0) / max(n, 1):.1f} ms ({n} requests)")
PY
}
run() {  # run NAME GRPC_PORT [GEN_METRICS_HOST GEN_METRICS_PORT]
  [ "${ALONE_ONLY:-0}" = 1 ] && return 0
  "$BIN/inflight-bench" --no-progress --vocab-size 32000 -i grpc --url "127.0.0.1:$2" -n "$N" \
    --warmup 2 --seed 5 --request-rate "$RATE" --json - "${MIX[@]}" >"$OUT/disagg-$1.json"
  local transfer="-"
  if [ $# -ge 4 ]; then
    transfer=$(curl -s "$3:$4/metrics" | awk '
      /^nv_trt_llm_disaggregated_serving_metrics/ && /kv_cache_transfer_ms/ {ms=$NF}
      /^nv_trt_llm_disaggregated_serving_metrics/ && /request_count/ {n=$NF}
      END {if (n > 0) printf "%.1f ms over %d requests", ms / n, n}')
  fi
  python3 - "$OUT/disagg-$1.json" "$1" "$transfer" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
r = r[0] if isinstance(r, list) else r
def g(*keys):
    for k in keys:
        v = r
        for part in k.split('.'):
            v = v.get(part) if isinstance(v, dict) else None
        if v is not None:
            return v
    return float('nan')
print(f"{sys.argv[2]:14s} TTFT p50 {g('time_to_first_token_ms.p50'):8.1f} ms  p99 {g('time_to_first_token_ms.p99'):8.1f} ms  "
      f"ITL p50/p90/p99 {g('inter_token_latency_ms.p50'):5.1f}/{g('inter_token_latency_ms.p90'):5.1f}/{g('inter_token_latency_ms.p99'):5.1f} ms  out tok/s {g('output_tokens_per_sec'):6.1f}  "
      f"errors {g('errors')}  K/V transfer {sys.argv[3]}")
PY
}

echo "== $N requests at $RATE/s: 30% 1024-token prompts, else 128; 128 tokens out"
if [ "${ALONE_ONLY:-0}" != 1 ] && want aggregated; then
  repo agg 2
  serve agg 18600
  ready 127.0.0.1 18600
  run aggregated 18601
  cleanup
fi

if want lo; then
  repo workers 1
  serve workers 18610 taskset -c 0
  serve workers 18620 taskset -c 1
  ready 127.0.0.1 18610
  ready 127.0.0.1 18620
  repo front 0 --disaggregated-context-url 127.0.0.1:18611 --disaggregated-generation-url 127.0.0.1:18621
  serve front 18630
  ready 127.0.0.1 18630
  alone disagg-lo 18631 127.0.0.1 18622
  run disagg-lo 18631 127.0.0.1 18622
  cleanup
fi

if want shm; then
  mkdir -p "$SHM_ROOT"
  SERVE_ARGS=(--model-path-allow "$SHM_ROOT")
  repo workers 1 --context-phase-shm-dir "$SHM_ROOT/handoff"
  serve workers 18610 taskset -c 0
  serve workers 18620 taskset -c 1
  ready 127.0.0.1 18610
  ready 127.0.0.1 18620
  repo front 0 --disaggregated-context-url 127.0.0.1:18611 --disaggregated-generation-url 127.0.0.1:18621 \
    --disaggregated-transport shm
  serve front 18630
  ready 127.0.0.1 18630
  alone disagg-shm 18631 127.0.0.1 18622
  run disagg-shm 18631 127.0.0.1 18622
  segments=$(curl -s 127.0.0.1:18612/metrics | awk '/^inflight_kv_handoff_segments/ && /"written"/ {w=$NF}
    /^inflight_kv_handoff_segments/ && /"declined"/ {d=$NF} END {printf "%d written, %d declined (sent inline)", w, d}')
  echo "               segments: $segments"
  SERVE_ARGS=()
  cleanup
fi

if ! want netns; then
  :
elif [ "$(id -u)" = 0 ] && command -v ip >/dev/null; then
  ip netns add $NS
  ip link add inflight-va type veth peer name inflight-vb
  ip link set inflight-vb netns $NS
  ip addr add 10.77.0.1/24 dev inflight-va && ip link set inflight-va up
  ip -n $NS addr add 10.77.0.2/24 dev inflight-vb && ip -n $NS link set inflight-vb up
  ip -n $NS link set lo up
  repo workers 1
  serve workers 18610 taskset -c 0
  serve workers 18620 ip netns exec $NS taskset -c 1
  ready 127.0.0.1 18610
  ready 10.77.0.2 18620
  repo front 0 --disaggregated-context-url 127.0.0.1:18611 --disaggregated-generation-url 10.77.0.2:18621
  serve front 18630
  ready 127.0.0.1 18630
  alone disagg-netns 18631 10.77.0.2 18622
  run disagg-netns 18631 10.77.0.2 18622
  cleanup
else
  echo "disagg-netns: skipped (needs root and ip)"
fi
