#!/usr/bin/env bash
# Builds inflight and runs the main job. Until the server lands (issue "Triton-compatible
# serving"), that is inflight-generate on the bundled demo model (models/demo, trained by
# tools/demo-model/make-demo-model.sh), or on the model given as $1.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DINFLIGHT_BUILD_TESTS=OFF
cmake --build build -j "$(nproc)" --target inflight-generate
MODEL="${1:-models/demo/inflight-demo-q8_0.gguf}"
exec ./build/apps/inflight-generate --model "$MODEL" --prompt "${PROMPT:-Once upon a time}" -n "${TOKENS:-64}"
