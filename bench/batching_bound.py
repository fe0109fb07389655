#!/usr/bin/env python3
"""The most in-flight batching can gain over static batching on this machine, from its own
decode step costs.

Reads step_bench's JSON (BM_DecodeStep at batch 1..32), takes the cost of a decode step
with n sequences, t(n), by linear interpolation, and replays the workload of batching_bench's
in-flight-vs-static scenario (N requests, output ~ N(128, 64) tokens, max_batch_size B, all
arriving at once) under three schedules, counting decode steps only (prefill is the same
work in all three):

  in-flight       B slots kept full; a finished request's slot is refilled at the next step
  static          batches of B in arrival order; finished rows leave the batch (inflight's
                  `static`, TRT-LLM's STATIC_BATCH) and the batch runs until its longest ends
  padded static   the same, but finished rows keep being computed (a fixed-shape batch, as
                  in TRT-LLM's V1 batching or a plain batched generate())

Usage:
  ./bench/step_bench --preset tinyllama-1.1b --benchmark_filter=DecodeStep \\
      --benchmark_format=json > steps.json
  python3 ../bench/batching_bound.py steps.json [--requests 128] [--batch 32] [--seed 42]
"""
import argparse
import json
import random
import re


def step_costs(path):
    with open(path) as f:
        data = json.load(f)
    costs = {}
    for b in data["benchmarks"]:
        m = re.match(r"BM_DecodeStep/batch:(\d+)/", b["name"])
        if m and b.get("run_type", "iteration") == "iteration":
            costs[int(m.group(1))] = b["real_time"]  # in the benchmark's unit (us)
    if len(costs) < 2:
        raise SystemExit(f"{path}: need BM_DecodeStep rows for at least two batch sizes")
    return costs


def interpolate(costs):
    ks = sorted(costs)

    def t(n):
        if n <= 0:
            return 0.0
        if n >= ks[-1]:
            return costs[ks[-1]] * n / ks[-1]
        for a, b in zip(ks, ks[1:]):
            if a <= n <= b:
                return costs[a] + (costs[b] - costs[a]) * (n - a) / (b - a)
        return costs[ks[0]]

    return t


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("steps_json")
    ap.add_argument("--requests", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()
    t = interpolate(step_costs(args.steps_json))
    rng = random.Random(args.seed)
    outputs = [int(min(512, max(1, rng.gauss(128, 64)))) for _ in range(args.requests)]
    batches = [outputs[i:i + args.batch] for i in range(0, len(outputs), args.batch)]

    def schedules(cost):
        static = sum(cost(sum(1 for o in b if o > s)) for b in batches for s in range(max(b)))
        padded = sum(cost(len(b)) * max(b) for b in batches)
        inflight, queue, active = 0.0, list(outputs), []
        while queue or active:
            while queue and len(active) < args.batch:
                active.append(queue.pop(0))
            inflight += cost(len(active))
            active = [a - 1 for a in active if a > 1]
        return inflight, static, padded

    inflight, static, padded = schedules(t)
    flat = schedules(lambda n: 1.0 if n > 0 else 0.0)
    tokens = sum(outputs)
    print("step cost t(n) / t(1) at n = 1, 8, 16, 32: " + ", ".join(f"{t(n) / t(1):.2f}" for n in (1, 8, 16, 32)))
    for name, cost in (("in-flight", inflight), ("static", static), ("padded static", padded)):
        print(f"{name:14s} {cost / 1e6:8.2f} s of decode steps  {tokens / (cost / 1e6):8.1f} output tok/s")
    print(f"bound on in-flight / static output tokens/s here: {static / inflight:.2f}x "
          f"(vs padded static: {padded / inflight:.2f}x); with a step cost flat in n (a GPU's regime): "
          f"{flat[1] / flat[0]:.2f}x")


if __name__ == "__main__":
    main()
