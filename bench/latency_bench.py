#!/usr/bin/env python3
"""Latency under load: in-flight batching (with and without the latency budget) vs static
batching vs llama.cpp's server, under Poisson arrivals at fractions of the measured in-flight
capacity. One command; prints a Markdown table, writes the figures as JSON and a plot as SVG.

    python3 bench/latency_bench.py --model M.gguf --workload short          # ~10 min per seed
    python3 bench/latency_bench.py --model M.gguf --workload long           # ~25 min per seed
    python3 bench/latency_bench.py ... --llama-server /path/to/llama-server # adds the peer

Workloads (seeded; random token ids, greedy, end-of-sequence ignored so every request makes
exactly its output length):
  short: prompts of 1-300 tokens, 4-96 output tokens (uniform), 40 requests
  long:  prompts of 512-2048 tokens, 16-128 output tokens (uniform), 16 requests
Capacity: the requests all arriving at once through the default in-flight configuration,
in requests/s; load L means Poisson arrivals at L x capacity (the same exponential gaps,
scaled, for every load and mode).

inflight modes run through `inflight-generate --prompts-file` (latencies measured by the
engine: arrival -> first token, gaps between a request's token-producing steps); llama.cpp's
server through its /completion endpoint with streaming (measured by this client: send ->
first token event, gaps between token events).
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

WORKLOADS = {
    "short": dict(requests=40, prompt=(1, 300), output=(4, 96)),
    "long": dict(requests=16, prompt=(512, 2048), output=(16, 128)),
}


def make_workload(kind, n, seed):
    w = WORKLOADS[kind]
    rng = random.Random(seed)
    reqs = []
    for _ in range(n):
        p = rng.randint(*w["prompt"])
        o = rng.randint(*w["output"])
        reqs.append({"prompt_ids": [rng.randrange(100, 32000) for _ in range(p)], "max_tokens": o})
    gaps = [rng.expovariate(1.0) for _ in range(n)]  # unit-rate gaps, scaled per load
    return reqs, gaps


def percentile(values, q):
    if not values:
        return 0.0
    v = sorted(values)
    i = max(0, min(len(v) - 1, int(-(-q * len(v) // 1)) - 1))
    return v[i]


def run_inflight(args, reqs, arrivals_ms, mode):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for r, a in zip(reqs, arrivals_ms):
            f.write(json.dumps(dict(r, arrival_ms=a)) + "\n")
        path = f.name
    cmd = [args.generate, "-m", args.model, "--prompts-file", path, "--threads", str(args.threads),
           "--ignore-eos", "--max-batch-size", str(args.max_batch_size),
           "--kv-cache-tokens", str(args.kv_cache_tokens), "--max-num-tokens",
           str(args.max_num_tokens)]
    if mode == "static":
        cmd += ["--batching", "static", "--max-inter-token-latency-ms", "-1"]
    elif mode == "inflight-unbudgeted":
        cmd += ["--max-inter-token-latency-ms", "-1"]
    elif mode == "inflight-chunked":
        cmd += ["--max-inter-token-latency-ms", "-1", "--chunked-context", "--max-num-tokens", "256"]
    elif mode.startswith("inflight@"):  # a fixed target, e.g. inflight@150
        cmd += ["--max-inter-token-latency-ms", mode.split("@")[1]]
    else:  # inflight: the latency budget's default target
        cmd += ["--max-inter-token-latency-ms", str(args.target_ms)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    os.unlink(path)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
    summary = None
    per = []
    for line in out.stdout.splitlines():
        j = json.loads(line)
        if "summary" in j:
            summary = j["summary"]
        else:
            per.append(j)
    return {
        "latency_mean_ms": summary["latency_ms"]["mean"],
        "ttft_p50_ms": summary["ttft_ms"]["p50"],
        "ttft_p99_ms": summary["ttft_ms"]["p99"],
        "ttft_mean_ms": summary["ttft_ms"]["mean"],
        "itl_p50_ms": summary["itl_ms"]["p50"],
        "itl_p99_ms": summary["itl_ms"]["p99"],
        "itl_mean_ms": summary["itl_ms"]["mean"],
        "output_tok_s": summary["output_tokens_per_second"],
        "seconds": summary["seconds"],
    }


class LlamaServer:
    def __init__(self, args):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        env = dict(os.environ)
        if args.llama_lib:
            env["LD_LIBRARY_PATH"] = args.llama_lib + ":" + env.get("LD_LIBRARY_PATH", "")
        self.proc = subprocess.Popen(
            [args.llama_server, "-m", args.model, "-t", str(args.threads), "--port", str(self.port),
             "-np", str(args.max_batch_size), "-c", str(args.kv_cache_tokens), "-b", "2048",
             "-ub", "512", "--no-webui", "-kvu"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        for _ in range(600):
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        self.proc.kill()
        sys.exit("llama-server did not come up")

    def close(self):
        self.proc.terminate()
        self.proc.wait()

    def one(self, req, result):
        body = json.dumps({"prompt": req["prompt_ids"], "n_predict": req["max_tokens"],
                           "ignore_eos": True, "stream": True, "temperature": 0,
                           "cache_prompt": False})
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=3600)
        t0 = time.monotonic()
        c.request("POST", "/completion", body, {"Content-Type": "application/json"})
        resp = c.getresponse()
        times = []
        while True:
            line = resp.readline()
            if not line:
                break
            if not line.startswith(b"data: "):
                continue
            j = json.loads(line[6:])
            n = len(j.get("tokens", [])) or (1 if j.get("content") else 0)
            now = time.monotonic()
            times += [now] * n
            if j.get("stop"):
                break
        result.update(start=t0, times=times, end=time.monotonic())

    def run(self, reqs, arrivals_ms):
        results = [dict() for _ in reqs]
        threads = []
        t0 = time.monotonic()
        for r, a, res in zip(reqs, arrivals_ms, results):
            delay = t0 + a / 1000 - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            th = threading.Thread(target=self.one, args=(r, res))
            th.start()
            threads.append(th)
        for th in threads:
            th.join()
        lat, ttft, itl, tokens = [], [], [], 0
        for res in results:
            ts = res["times"]
            tokens += len(ts)
            lat.append((res["end"] - res["start"]) * 1000)
            if ts:
                ttft.append((ts[0] - res["start"]) * 1000)
            # Tokens that arrived together share their gap, as the engine counts them.
            i = 1
            while i < len(ts):
                j = i
                while j + 1 < len(ts) and ts[j + 1] == ts[i]:
                    j += 1
                gap = (ts[i] - ts[i - 1]) * 1000 / (j - i + 1)
                itl += [gap] * (j - i + 1)
                i = j + 1
        seconds = max(r["end"] for r in results) - t0
        return {
            "latency_mean_ms": sum(lat) / len(lat),
            "ttft_p50_ms": percentile(ttft, 0.5),
            "ttft_p99_ms": percentile(ttft, 0.99),
            "ttft_mean_ms": sum(ttft) / max(1, len(ttft)),
            "itl_p50_ms": percentile(itl, 0.5),
            "itl_p99_ms": percentile(itl, 0.99),
            "itl_mean_ms": sum(itl) / max(1, len(itl)),
            "output_tok_s": tokens / seconds,
            "seconds": seconds,
        }


def svg_plot(rows, modes, loads, path, title):
    """Two panels: mean latency and p99 inter-token latency against load, one line per mode."""
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"]
    w, h, pad = 460, 300, 50
    panels = [("latency_mean_ms", "mean latency (s)", 1000), ("itl_p99_ms", "p99 inter-token latency (ms)", 1)]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * w}" height="{h + 40}" '
           'font-family="sans-serif" font-size="11">',
           f'<text x="{w}" y="16" text-anchor="middle" font-size="13">{title}</text>']
    for pi, (key, label, div) in enumerate(panels):
        x0 = pi * w
        ymax = max(r[key] / div for r in rows) * 1.1 or 1
        lo, hi = min(loads), max(loads)
        sx = lambda l: x0 + pad + (l - lo) / ((hi - lo) or 1) * (w - 2 * pad)
        sy = lambda v: 30 + (h - pad) * (1 - v / ymax)
        out.append(f'<line x1="{x0 + pad}" y1="{sy(0)}" x2="{x0 + w - pad}" y2="{sy(0)}" stroke="#000"/>')
        out.append(f'<line x1="{x0 + pad}" y1="30" x2="{x0 + pad}" y2="{sy(0)}" stroke="#000"/>')
        out.append(f'<text x="{x0 + w / 2}" y="{h + 28}" text-anchor="middle">load (fraction of in-flight capacity) -- {label}</text>')
        for k in range(5):
            v = ymax * k / 4
            out.append(f'<text x="{x0 + pad - 4}" y="{sy(v) + 4}" text-anchor="end">{v:.3g}</text>')
        for l in loads:
            out.append(f'<text x="{sx(l)}" y="{sy(0) + 14}" text-anchor="middle">{l:g}</text>')
        for mi, m in enumerate(modes):
            pts = [(sx(r["load"]), sy(r[key] / div)) for r in rows if r["mode"] == m]
            c = colors[mi % len(colors)]
            out.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>' %
                       (c, " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)))
            if pi == 0:
                out.append(f'<text x="{x0 + pad + 8}" y="{44 + 14 * mi}" fill="{c}">{m}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--workload", choices=sorted(WORKLOADS), default="short")
    ap.add_argument("--requests", type=int, default=0, help="default: the workload's")
    ap.add_argument("--loads", default="0.5,0.8,0.95")
    ap.add_argument("--modes", default="inflight,inflight-unbudgeted,static")
    ap.add_argument("--target-ms", type=float, default=0, help="max_inter_token_latency_ms (0: auto)")
    ap.add_argument("--seeds", default="7", help="comma-separated: one request set and arrival "
                    "sequence each; figures are means over them")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-batch-size", type=int, default=16)
    ap.add_argument("--max-num-tokens", type=int, default=2048)
    ap.add_argument("--kv-cache-tokens", type=int, default=0, help="default: batch x longest request")
    ap.add_argument("--generate", default=os.path.join(os.path.dirname(__file__), "..", "build", "apps", "inflight-generate"))
    ap.add_argument("--llama-server", default="", help="llama.cpp's llama-server binary: adds it as a mode")
    ap.add_argument("--llama-lib", default="", help="LD_LIBRARY_PATH for it")
    ap.add_argument("--json", default="")
    ap.add_argument("--svg", default="")
    args = ap.parse_args()
    w = WORKLOADS[args.workload]
    n = args.requests or w["requests"]
    if not args.kv_cache_tokens:
        args.kv_cache_tokens = args.max_batch_size * (w["prompt"][1] + w["output"][1] + 64)
    modes = [m for m in args.modes.split(",") if m]
    if args.llama_server:
        modes.append("llama-server")
    loads = [float(x) for x in args.loads.split(",")]
    seeds = [int(x) for x in args.seeds.split(",")]

    server = LlamaServer(args) if args.llama_server else None
    runs, capacities = [], []
    try:
        for seed in seeds:
            reqs, gaps = make_workload(args.workload, n, seed)
            cap_run = run_inflight(args, reqs, [0.0] * n, "inflight")
            capacity = n / cap_run["seconds"]
            capacities.append(capacity)
            print(f"seed {seed}: capacity (all {n} at once, in-flight): {capacity:.3f} req/s, "
                  f"{cap_run['output_tok_s']:.1f} output tok/s", flush=True)
            for load in loads:
                rate = load * capacity
                arrivals, t = [], 0.0
                for g in gaps:
                    arrivals.append(t * 1000)
                    t += g / rate
                # Modes one after another per (seed, load): machine drift meets them alike.
                for m in modes:
                    r = server.run(reqs, arrivals) if m == "llama-server" else run_inflight(args, reqs, arrivals, m)
                    r.update(mode=m, load=load, rate=rate, seed=seed)
                    runs.append(r)
                    print(json.dumps(r), flush=True)
    finally:
        if server:
            server.close()
    # Means over the seeds.
    rows = []
    for load in loads:
        for m in modes:
            same = [r for r in runs if r["load"] == load and r["mode"] == m]
            row = {k: sum(r[k] for r in same) / len(same) for k in same[0] if isinstance(same[0][k], float)}
            row.update(mode=m, load=load)
            rows.append(row)
    capacity = sum(capacities) / len(capacities)

    print(f"\n{args.workload} workload, {n} requests, seeds {args.seeds} (means over them), "
          f"capacity {capacity:.3f} req/s\n")
    print("| load | mode | mean latency (s) | mean TTFT (s) | TTFT p50 / p99 (s) | ITL mean (ms) | ITL p50 / p99 (ms) | output tok/s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['load']:g} | {r['mode']} | {r['latency_mean_ms'] / 1000:.2f} | "
              f"{r['ttft_mean_ms'] / 1000:.2f} | "
              f"{r['ttft_p50_ms'] / 1000:.2f} / {r['ttft_p99_ms'] / 1000:.2f} | {r['itl_mean_ms']:.1f} | "
              f"{r['itl_p50_ms']:.1f} / {r['itl_p99_ms']:.1f} | {r['output_tok_s']:.1f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"workload": args.workload, "requests": n, "seeds": seeds,
                       "capacity_req_s": capacities, "rows": rows, "runs": runs}, f, indent=1)
    if args.svg:
        svg_plot(rows, modes, loads, args.svg,
                 f"{args.workload} workload: {os.path.basename(args.model)}, {args.threads} threads")


if __name__ == "__main__":
    main()
