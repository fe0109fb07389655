#!/usr/bin/env python3
"""Fails when a file under src/ includes a layer above its own (DESIGN.md, "Layers").

Reads every `#include "x/..."` line of every file under src/ and checks the edge
(the file's layer -> x) against the table below. Reports file:line and the edge.
The build enforces the same through each library's include path (a library sees only the
headers of what it links); this check also covers edges the link lines happen to allow.

Usage: layer_check.py [SRC_DIR]   (default: the src/ next to this script's folder)
"""

import os
import re
import sys

# Layers, bottom to top (docs: DESIGN.md). A layer may include itself and what is listed.
#   base; tensor; format, kernels; tokenizer, jinja, chat, kvcache, sampling; model, guided; engine;
#   parallel; serving (Triton's core); backends/llm; frontends; clients; (apps, outside src/)
ALLOWED = {
    "base": set(),
    "tensor": {"base"},
    "format": {"base", "tensor"},
    "kernels": {"base", "tensor"},
    "tokenizer": {"base", "format"},
    "jinja": {"base"},
    "chat": {"base"},
    "kvcache": {"base", "tensor", "kernels"},
    "sampling": {"base", "kernels"},
    "model": {"base", "tensor", "format", "kernels", "tokenizer"},
    "guided": {"base", "tokenizer", "sampling"},
    "engine": {"base", "tensor", "format", "kernels", "tokenizer", "kvcache", "sampling", "model"},
    "parallel": {"base", "tensor", "format", "kernels", "tokenizer", "kvcache", "sampling",
                 "model", "engine"},
    # Triton's core: no engine, KV cache, model, parallel or guided type.
    "serving": {"base", "tokenizer"},
    "backends/llm": {"base", "tensor", "format", "kernels", "tokenizer", "kvcache", "sampling",
                     "model", "guided", "engine", "parallel", "serving"},
    # Wire <-> serving::Server only: no engine, no backend.
    "frontends": {"base", "tokenizer", "jinja", "chat", "serving"},
    "clients": {"base"},
}

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def layer_of_path(rel):
    """The layer of a path relative to src/ (longest table key that prefixes it)."""
    for key in sorted(ALLOWED, key=len, reverse=True):
        if rel == key or rel.startswith(key + "/"):
            return key
    return None


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "src")
    src = os.path.normpath(src)
    errors = []
    checked = 0
    for root, dirs, files in os.walk(src):
        dirs.sort()
        for name in sorted(files):
            if not name.endswith((".h", ".cc", ".cpp", ".hpp", ".inc", ".in")):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, src).replace(os.sep, "/")
            own = layer_of_path(rel)
            if own is None:
                errors.append(f"src/{rel}: folder is in no layer (add it to tools/layer_check.py)")
                continue
            with open(path, encoding="utf-8", errors="replace") as f:
                for number, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m or "/" not in m.group(1):
                        continue  # generated protos ("model_config.pb.h"), same-folder files
                    target = layer_of_path(m.group(1))
                    if target is None:
                        top = m.group(1).split("/")[0]
                        if not os.path.isdir(os.path.join(src, top)):
                            continue  # not a project header
                        errors.append(f"src/{rel}:{number}: includes \"{m.group(1)}\": "
                                      f"{own} -> {top}, a folder in no layer")
                        continue
                    checked += 1
                    if target != own and target not in ALLOWED[own]:
                        errors.append(f"src/{rel}:{number}: includes \"{m.group(1)}\": "
                                      f"{own} -> {target} is not allowed "
                                      f"({own} may include: {', '.join(sorted(ALLOWED[own])) or 'nothing'})")
    for e in errors:
        print(e)
    if errors:
        print(f"layer_check: {len(errors)} include(s) against the layers (tools/layer_check.py)")
        return 1
    print(f"layer_check: {checked} project includes follow the layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
