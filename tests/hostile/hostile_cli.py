"""Run the CLI in-process as a hostile user would, and check it answers as promised."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from clustersim.cli import main

TINY = """\
name: tiny
seed: 1
workload:
  tenants:
    - name: t
      arrival: {kind: poisson, rate_per_s: 50.0}
      prompt_tokens: {kind: fixed, tokens: 64}
      output_tokens: {kind: fixed, tokens: 8}
stop: {max_requests: 20}
cluster: {hardware: H100-SXM, model: Llama-3.1-8B}
cost: {kind: unit, step_time_s: 0.01}
"""

# every kind of scenario field: whole numbers, fractions, times, byte counts, names
FIELDS = (
    "seed",
    "stop.max_requests",
    "stop.horizon_s",
    "workload.tenants.0.arrival.rate_per_s",
    "workload.tenants.0.prompt_tokens.tokens",
    "workload.tenants.0.output_tokens.tokens",
    "workload.tenants.0.shared_prefix_tokens",
    "scheduler.max_num_seqs",
    "scheduler.max_num_batched_tokens",
    "scheduler.batch_wait_s",
    "kv.block_size_tokens",
    "kv.num_blocks",
    "kv.watermark_frac",
    "kv.host_swap_bytes",
    "kv.max_output_tokens",
    "cost.step_time_s",
    "cluster.num_replicas",
    "cluster.tensor_parallel",
    "slo.ttft_s",
    "slo.itl_s",
    "slo.percentile",
    "metrics.warmup_s",
    "metrics.cooldown_requests",
    "name",
)


@pytest.fixture(name="hostile_dir")
def hostile_dir_fixture(tmp_path: Path) -> Iterator[Path]:
    """A working folder holding ``tiny.yaml``, made the current folder for the test."""
    (tmp_path / "tiny.yaml").write_text(TINY, encoding="utf-8")
    old = Path.cwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(old)


def cli(*args: str, **kwargs: Any) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False, **kwargs)


def assert_answered(result: Result, allowed: tuple[int, ...] = (0, 2)) -> None:
    """The promise: exit 0, or exit 2 with exactly one line on stderr; never a traceback or exit 3."""
    assert "Traceback" not in result.output, result.output
    assert result.exit_code in allowed, (result.exit_code, result.output)
    if result.exit_code == 2:
        lines = result.stderr.splitlines()
        if lines and lines[-1].startswith("Error: "):  # click's own usage error: usage, hint, error
            return
        assert len(lines) == 1 and lines[0].startswith("clustersim: error: "), lines
        assert len(lines[0]) <= 600, lines[0]
