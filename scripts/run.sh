#!/usr/bin/env bash
# Builds inflight and runs the main job. Until the server lands (issue "Triton-compatible
# serving"), that is inflight-generate on a model: $1, or the golden Llama model in ../shared.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DINFLIGHT_BUILD_TESTS=OFF
cmake --build build -j "$(nproc)" --target inflight-generate
MODEL="${1:-../shared/golden/llama-gqa-q8_0.gguf}"
exec ./build/apps/inflight-generate --model "$MODEL" --prompt "${PROMPT:-Once upon a time}" -n "${TOKENS:-48}"
