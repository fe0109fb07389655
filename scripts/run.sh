#!/usr/bin/env bash
# Builds inflight and runs the main job: inflight-server on the bundled demo model
# (models/demo, trained by tools/demo-model/make-demo-model.sh) or on the model given as $1,
# with a model repository written by its own init-repo (preprocessing, tensorrt_llm,
# postprocessing, ensemble, tensorrt_llm_bls). Ports: HTTP 8000, gRPC 8001, metrics 8002
# (override with HTTP_PORT, GRPC_PORT, METRICS_PORT). Stop it with Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
source scripts/ccache-env.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DINFLIGHT_BUILD_TESTS=OFF \
  "${CMAKE_LAUNCHER_ARGS[@]}"
cmake --build build -j "$(nproc)" --target inflight-server inflight-generate
MODEL="${1:-models/demo/inflight-demo-q8_0.gguf}"
REPO=build/model-repository
./build/apps/inflight-server init-repo --model "$MODEL" --out "$REPO" --force
cat <<MSG
Try:
  curl -X POST localhost:${HTTP_PORT:-8000}/v2/models/ensemble/generate -d '{"text_input": "Once upon a time", "max_tokens": 40}'
  curl -N -X POST localhost:${HTTP_PORT:-8000}/v2/models/ensemble/generate_stream -d '{"text_input": "Once upon a time", "max_tokens": 40, "stream": true}'
  curl localhost:${HTTP_PORT:-8000}/v1/chat/completions -d '{"model": "ensemble", "messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": 40}'
  curl localhost:${METRICS_PORT:-8002}/metrics
  open http://localhost:${HTTP_PORT:-8000}/ (playground and the batcher's live dashboard)
MSG
exec ./build/apps/inflight-server --model-repository "$REPO" --http-port "${HTTP_PORT:-8000}" \
  --grpc-port "${GRPC_PORT:-8001}" --metrics-port "${METRICS_PORT:-8002}"
