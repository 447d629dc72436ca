"""A corpus row's metrics, measured in its simulated run the way the benchmark tools measure them.

``vllm bench serve``, ``sglang.bench_serving``, ``trtllm-bench`` and GenAI-Perf agree on these:

- throughputs are over the benchmark's duration, from its start (t=0, when the first request is
  sent) to the last request's end: output tokens, input plus output tokens, completed requests;
- TTFT and end-to-end latency are per request, from sending it to its first token / its end;
- TPOT is per request, ``(E2E - TTFT) / (output tokens - 1)``, over requests with two tokens or more;
- ITL is every gap between two consecutive tokens of a request;
- means and percentiles are over every completed request (every gap, for ITL).

The percentiles are the run summary's (:mod:`clustersim.metrics`), so a row's figure is the one a user
running the same scenario reads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from numpy.typing import NDArray

from clustersim.validation.published import saturated_tokens_per_s

# corpus metric -> (summary block, statistic); the throughputs are computed from requests.parquet
LATENCY_METRICS: dict[str, tuple[str, str]] = {
    f"{stem}_{stat}_ms": (f"{stem}_s", stat)
    for stem in ("ttft", "tpot", "itl", "e2e")
    for stat in ("mean", "p50", "p99")
}
THROUGHPUT_METRICS = ("output_tok_per_s", "total_tok_per_s", "req_per_s")
QUEUED_SPAN_FRAC = 0.01  # arrivals within 1% of the run: every request was queued at once (an offline run)


def measure_run(run_dir: Path, steady: bool = False, replicas: int = 0) -> dict[str, float]:
    """Every corpus metric of the run in ``run_dir`` (throughputs for the whole deployment, latencies in ms).

    ``steady``: the run is a shortened copy of a much longer benchmark (MLPerf's ten minutes, a
    30,000-request ``trtllm-bench``), so throughputs are its steady state: for Poisson arrivals the
    tokens produced from the middle of the arrival span to its end, per second (what MLPerf's completed
    tokens per second measures over ten minutes; counting the requests that complete in so short a
    window instead misses the long ones still running while the batch fills, a deficit of up to
    40% when latencies are a third of the run); for queued requests the rate while the queue was never
    empty (:func:`clustersim.validation.published.saturated_tokens_per_s`). Latencies are then the
    summary's over its ``metrics`` window. ``replicas``: the run simulated one of that many identical
    replicas of an offline benchmark, so its throughputs count that many times.
    """
    summary: dict[str, Any] = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    columns = ["status", "prompt_tokens", "output_tokens", "num_emitted_tokens", "arrival_at_s", "finished_at_s",
               "replica", "first_scheduled_at_s"]  # fmt: skip
    requests = pq.read_table(run_dir / "requests.parquet", columns=columns)
    done = requests.filter(pc.equal(requests.column("status"), "completed"))
    measured: dict[str, float] = {}
    if done.num_rows:
        scale = max(1, replicas)
        measured.update({k: v * scale for k, v in _throughputs(run_dir, requests, done, steady).items()})
    for metric, (block, stat) in LATENCY_METRICS.items():
        value = (summary.get(block) or {}).get(stat)
        if isinstance(value, int | float):
            measured[metric] = 1e3 * float(value)
    return measured


def _column(table: pa.Table, name: str) -> NDArray[np.float64]:
    return np.asarray(table.column(name).to_numpy(zero_copy_only=False), dtype=np.float64)


def _throughputs(run_dir: Path, requests: pa.Table, done: pa.Table, steady: bool) -> dict[str, float]:
    finished = _column(done, "finished_at_s")
    output, prompt = _column(done, "num_emitted_tokens"), _column(done, "prompt_tokens")
    if not steady:
        duration_s = float(finished.max())
        if duration_s <= 0:
            return {}
        return {
            "output_tok_per_s": float(output.sum()) / duration_s,
            "total_tok_per_s": float(output.sum() + prompt.sum()) / duration_s,
            "req_per_s": done.num_rows / duration_s,
        }
    arrivals = np.sort(_column(requests, "arrival_at_s"))
    if float(arrivals[-1] - arrivals[0]) > QUEUED_SPAN_FRAC * float(finished.max()):  # arrivals over the run
        start_s, end_s = float(arrivals[len(arrivals) // 2]), float(arrivals[-1])
        emitted_s, prefilled_s = _produced_per_s(run_dir, start_s, end_s)
        per_request = float(output.mean())
        arrived = _column(requests, "arrival_at_s")
        asked = _column(requests, "output_tokens")[(arrived >= start_s) & (arrived <= end_s)]
        return {
            "output_tok_per_s": emitted_s,
            "total_tok_per_s": emitted_s + prefilled_s,
            "req_per_s": emitted_s / per_request,
            # what the arrivals in the window asked for: a run producing less is falling behind them
            "offered_output_tok_per_s": float(asked.sum()) / (end_s - start_s),
        }
    steps = pq.read_table(run_dir / "steps.parquet")
    num_replicas = int(pc.max(requests.column("replica")).as_py() or 0) + 1
    rate = saturated_tokens_per_s(requests, steps, num_replicas)
    per_request = float(output.mean())
    return {
        "output_tok_per_s": rate,
        "total_tok_per_s": rate * (per_request + float(prompt.mean())) / per_request,
        "req_per_s": rate / per_request,
    }


def _produced_per_s(run_dir: Path, start_s: float, end_s: float) -> tuple[float, float]:
    """Output tokens emitted and prompt tokens prefilled per second between ``start_s`` and ``end_s``, over
    every replica (a logged run of identical iterations counts by its share of the span it covers)."""
    names = ["started_at_s", "duration_s", "num_steps", "num_emitted_tokens", "num_prefill_tokens"]
    steps = pq.read_table(run_dir / "steps.parquet", columns=names)
    started, duration = _column(steps, "started_at_s"), _column(steps, "duration_s")
    overlap = np.clip(np.minimum(started + duration, end_s) - np.maximum(started, start_s), 0.0, None)
    share = np.where(duration > 0, overlap / np.maximum(duration, 1e-300), (started >= start_s) & (started < end_s))
    count = _column(steps, "num_steps") * share
    span_s = end_s - start_s
    emitted = float((_column(steps, "num_emitted_tokens") * count).sum())
    return emitted / span_s, float((_column(steps, "num_prefill_tokens") * count).sum()) / span_s


def run_facts(run_dir: Path) -> dict[str, Any]:
    """What a reader compares with the engine's own log: KV blocks per replica and their tokens."""
    summary: dict[str, Any] = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    return {
        "kv_blocks_per_replica": (summary.get("kv_blocks_per_replica") or [None])[0],
        "num_completed": (summary.get("num_requests") or {}).get("completed"),
        "num_arrived": (summary.get("num_requests") or {}).get("arrived"),
    }
