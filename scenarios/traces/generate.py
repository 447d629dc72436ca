"""Regenerate the synthetic traces in this folder (deterministic: seed 2024).

``synthetic-azure.csv``: 400 requests in the Azure LLM inference trace format, Poisson arrivals at
8 req/s, lengths from the lognormal fits of the default scenario (prompt median 1020, sigma 0.50;
output median 129, sigma 0.99). ``synthetic-mooncake.jsonl``: 60 conversations of 1-8 turns in the
Mooncake trace format; block 0 is a system prompt every request shares, and each turn's prompt is the
previous prompt plus its answer plus a new question, so it extends its conversation's hash-id chain.

Run from this folder: ``python generate.py``.
"""

from __future__ import annotations

import datetime as dt
import json

import numpy as np

BLOCK_TOKENS = 512


def azure(rng: np.random.Generator, num: int = 400) -> list[str]:
    times_s = np.cumsum(rng.exponential(1 / 8, num))
    prompts = np.clip(np.rint(rng.lognormal(np.log(1020), 0.50, num)), 4, 8192).astype(int)
    outputs = np.clip(np.rint(rng.lognormal(np.log(129), 0.99, num)), 1, 2048).astype(int)
    start = dt.datetime(2024, 1, 1, 12, 0, 0)
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for time_s, prompt, output in zip(times_s, prompts, outputs, strict=True):
        stamp = start + dt.timedelta(microseconds=round(time_s * 1e6))
        lines.append(f"{stamp:%Y-%m-%d %H:%M:%S.%f}0,{prompt},{output}")
    return lines


def mooncake(rng: np.random.Generator, num_conversations: int = 60) -> list[str]:
    records = []
    next_id = 1
    for _ in range(num_conversations):
        at_ms = float(rng.uniform(0, 50_000))
        prompt = int(rng.integers(600, 2000))
        chain = [0]
        for _ in range(int(rng.integers(1, 9))):
            output = int(np.clip(np.rint(rng.lognormal(np.log(150), 0.8)), 1, 1024))
            while len(chain) < -(-prompt // BLOCK_TOKENS):
                chain.append(next_id)
                next_id += 1
            records.append((int(at_ms), prompt, output, list(chain)))
            prompt += output + int(rng.integers(20, 200))
            at_ms += float(rng.exponential(8000)) + 2000
    records.sort(key=lambda r: r[0])
    return [
        json.dumps({"timestamp": at, "input_length": p, "output_length": o, "hash_ids": ids})
        for at, p, o, ids in records
    ]


def main() -> None:
    rng = np.random.default_rng(2024)
    with open("synthetic-azure.csv", "w", encoding="utf-8") as handle:
        handle.write("\n".join(azure(rng)) + "\n")
    with open("synthetic-mooncake.jsonl", "w", encoding="utf-8") as handle:
        handle.write("\n".join(mooncake(rng)) + "\n")


if __name__ == "__main__":
    main()
