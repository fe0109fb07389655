#!/usr/bin/env bash
# Rebuilds the bundled demo model models/demo/inflight-demo-q8_0.gguf: generates the text,
# trains a ~1.8M-parameter Llama on it with Debian's PyTorch (CPU, ~20 minutes on 2 cores),
# and converts the Hugging Face folder with inflight-model convert, storing the chat template
# models/demo/chat_template.jinja in it. Needs a built tree (build/).
set -euo pipefail
cd "$(dirname "$0")/../.."
DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-torch python3-sentencepiece libopenblas0-pthread >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 tools/demo-model/make_corpus.py --out "$work/corpus.txt" --paragraphs 40000
/usr/bin/python3 tools/demo-model/train.py --corpus "$work/corpus.txt" --out-dir "$work/hf" --minutes "${MINUTES:-20}"
mkdir -p models/demo
build/apps/inflight-model convert "$work/hf" --dtype q8_0 --chat-template models/demo/chat_template.jinja \
  -o models/demo/inflight-demo-q8_0.gguf
ls -l models/demo/inflight-demo-q8_0.gguf
