#!/usr/bin/env python3
"""Writes demo-stories.json: the small inflight-bench dataset, prompts in the style of the
demo model's training stories with a reference continuation each (deterministic)."""
import json
import random

random.seed(7)
names = ["Leo", "Mia", "Tom", "Lily", "Sam", "Anna", "Max", "Zoe"]
animals = ["frog", "cat", "dog", "bird", "fish", "bunny"]
places = ["park", "beach", "forest", "garden", "river", "hill"]
things = ["ball", "kite", "boat", "hat", "cake", "tower"]
records = []
for _ in range(32):
    n, a, p, t = random.choice(names), random.choice(animals), random.choice(places), random.choice(things)
    records.append({
        "prompt": f"Once upon a time, {n} the {a} went to the {p} with a red {t}.",
        "output": (f" {n} played with the {t} all day. The sun was warm and the sky was blue. "
                   f"Then a friend came to the {p}, and they shared the {t}. {n} was very happy."),
    })
with open("demo-stories.json", "w") as f:
    json.dump(records, f, indent=1)
