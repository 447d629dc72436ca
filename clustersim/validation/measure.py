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
import pyarrow.compute as pc
import pyarrow.parquet as pq

# corpus metric -> (summary block, statistic); the throughputs are computed from requests.parquet
LATENCY_METRICS: dict[str, tuple[str, str]] = {
    f"{stem}_{stat}_ms": (f"{stem}_s", stat)
    for stem in ("ttft", "tpot", "itl", "e2e")
    for stat in ("mean", "p50", "p99")
}
THROUGHPUT_METRICS = ("output_tok_per_s", "total_tok_per_s", "req_per_s")


def measure_run(run_dir: Path) -> dict[str, float]:
    """Every corpus metric of the run in ``run_dir`` (throughputs for the whole deployment, latencies in ms)."""
    summary: dict[str, Any] = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    requests = pq.read_table(run_dir / "requests.parquet", columns=["status", "prompt_tokens", "num_emitted_tokens",
                                                                     "finished_at_s"])
    done = requests.filter(pc.equal(requests.column("status"), "completed"))
    measured: dict[str, float] = {}
    if done.num_rows:
        finished = np.asarray(done.column("finished_at_s").to_numpy(zero_copy_only=False), dtype=np.float64)
        duration_s = float(finished.max())
        output = float(pc.sum(done.column("num_emitted_tokens")).as_py() or 0)
        prompt = float(pc.sum(done.column("prompt_tokens")).as_py() or 0)
        if duration_s > 0:
            measured["output_tok_per_s"] = output / duration_s
            measured["total_tok_per_s"] = (output + prompt) / duration_s
            measured["req_per_s"] = done.num_rows / duration_s
    for metric, (block, stat) in LATENCY_METRICS.items():
        value = (summary.get(block) or {}).get(stat)
        if isinstance(value, int | float):
            measured[metric] = 1e3 * float(value)
    return measured


def run_facts(run_dir: Path) -> dict[str, Any]:
    """What a reader compares with the engine's own log: KV blocks per replica and their tokens."""
    summary: dict[str, Any] = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    return {
        "kv_blocks_per_replica": (summary.get("kv_blocks_per_replica") or [None])[0],
        "num_completed": (summary.get("num_requests") or {}).get("completed"),
        "num_arrived": (summary.get("num_requests") or {}).get("arrived"),
    }
