"""The benchmark's real-trace case: the Azure 2023 conversation trace replayed five times.

96,830 requests (19,366 x 5; each copy starts one mean gap after the previous one ends), replayed at
8x speed (``time_scale: 0.125``, about 44 req/s) onto 8 x H100-SXM serving Llama-3.1-8B with
continuous batching (256 sequences, 8,192 tokens per step): the workload the peer comparison used.
The trace is the public one (``shared/ground_truth/traces/azure2023_conv.csv`` beside a checkout,
or ``CLUSTERSIM_AZURE_CONV`` naming the file); without it, the shipped 400-row synthetic trace in
the same format is tiled to the same number of requests at the same mean rate, so the case always
runs (the table says which it used).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from clustersim.config.catalogue import builtin_data_dir
from clustersim.config.workload import TraceFile
from clustersim.workload.traces import read_trace

REPLAY_CASE = "azure-replay"
NUM_COPIES = 5
AZURE_CONV_REQUESTS = 19_366
AZURE_CONV_SPAN_S = 3_501.7  # the public trace's first to last arrival (58 minutes): its mean rate for the stand-in
REPLAY_REQUESTS = NUM_COPIES * AZURE_CONV_REQUESTS
TIME_SCALE = 0.125


def azure_conv_path() -> Path | None:
    """The public Azure conversation trace, if it is here."""
    named = os.environ.get("CLUSTERSIM_AZURE_CONV")
    candidates = [Path(named)] if named else []
    root = Path(__file__).resolve().parent.parent
    candidates += [root.parent / "shared" / "ground_truth" / "traces" / "azure2023_conv.csv"]
    return next((path for path in candidates if path.is_file()), None)


def write_replay_trace(target: Path) -> str:
    """Write the case's trace (arrival seconds from 0, prompt and output tokens) as Parquet; return
    which source it came from."""
    public = azure_conv_path()
    if public is not None:
        table = read_trace(public, TraceFile(path=str(public), format="azure"))
        arrivals, prompts, outputs = table.arrival_at_s, table.prompt_tokens, table.output_tokens
        source = "the public Azure 2023 conversation trace"
    else:
        synthetic = builtin_data_dir("scenarios") / "traces" / "synthetic-azure.csv"
        table = read_trace(synthetic, TraceFile(path=str(synthetic), format="azure"))
        # stretched to the public trace's mean rate, and tiled to its length
        scale = (
            AZURE_CONV_SPAN_S / AZURE_CONV_REQUESTS / (float(table.arrival_at_s[-1]) / (table.arrival_at_s.size - 1))
        )
        arrivals, prompts, outputs = _tile(table.arrival_at_s * scale, table.prompt_tokens, table.output_tokens,
                                           AZURE_CONV_REQUESTS)  # fmt: skip
        source = "the shipped synthetic Azure-format trace (the public trace is absent)"
    arrivals, prompts, outputs = _tile(arrivals, prompts, outputs, REPLAY_REQUESTS)
    pq.write_table(pa.table({"arrival_at_s": arrivals, "prompt_tokens": prompts, "output_tokens": outputs}), target)
    return source


def _tile(
    arrivals: np.ndarray[Any, Any], prompts: np.ndarray[Any, Any], outputs: np.ndarray[Any, Any], count: int
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The trace repeated until ``count`` rows, each copy one mean gap after the previous one's end."""
    span_s = float(arrivals[-1] - arrivals[0])
    gap_s = span_s / max(1, arrivals.size - 1)
    copies = -(-count // arrivals.size)
    offsets = np.repeat(np.arange(copies) * (span_s + gap_s), arrivals.size)
    tiled = (np.tile(arrivals - arrivals[0], copies) + offsets)[:count]
    return tiled, np.tile(prompts, copies)[:count], np.tile(outputs, copies)[:count]


def replay_scenario(trace_file: str, fast_forward: bool = True) -> dict[str, Any]:
    """The case's scenario mapping, replaying ``trace_file`` (relative to the scenario's folder)."""
    return {
        "name": f"bench-{REPLAY_CASE}-{REPLAY_REQUESTS}",
        "seed": 1,
        "workload": {
            "tenants": [
                {
                    "name": "conv",
                    "arrival": {"kind": "trace", "path": trace_file, "format": "parquet", "time_scale": TIME_SCALE},
                }
            ]
        },
        "cluster": {"num_replicas": 8, "hardware": "H100-SXM", "model": "Llama-3.1-8B"},
        "scheduler": {"policy": "continuous", "max_num_seqs": 256, "max_num_batched_tokens": 8192},
        "simulation": {"fast_forward": fast_forward},
    }
