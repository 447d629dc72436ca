"""A table of hostile values for every kind of scenario field: each run ends in exit 0 or in one
line and exit 2, never a traceback or an internal error."""

from __future__ import annotations

from pathlib import Path

import pytest
from hostile_cli import FIELDS, assert_answered, cli, hostile_dir_fixture  # noqa: F401 - the fixture hostile_dir

VALUES = (
    "true",
    ".inf",
    "-.inf",
    ".nan",
    "-1",
    "0",
    "1e-320",
    "1e400",
    str(2**70),
    "abc",
    "[]",
    "{}",
    "null",
    "'a\\nb'",
)


# the lifecycle's fields, over a scenario whose replica 0 fails and which an autoscaler scales
LIFECYCLE_BASE = (
    "cluster.num_replicas=2",
    "faults={kind: scripted, events: [{at_s: 0.05, replica: 0}], repair_s: 0.1, cold_start: {engine_init_s: 0.1}}",
    "autoscaler={kind: queue_length, target_outstanding_per_replica: 2, interval_s: 0.1, initial_replicas: 2}",
)
LIFECYCLE_FIELDS = (
    "faults.repair_s",
    "faults.events.0.at_s",
    "faults.events.0.replica",
    "faults.max_retries",
    "faults.on_failure",
    "faults.detect_s",
    "faults.cold_start.storage_bandwidth_bytes_per_s",
    "faults.cold_start.engine_init_s",
    "autoscaler.target_outstanding_per_replica",
    "autoscaler.interval_s",
    "autoscaler.min_replicas",
    "autoscaler.scale_down_window_s",
    "autoscaler.tolerance_frac",
)
# disaggregation's fields, over a prefill and a decode replica
DISAGG_BASE = (
    "cluster.groups=[{count: 1, role: prefill}, {count: 1, role: decode}]",
    "disaggregation={link: {kind: infiniband}, nodes: {gpus_per_node: 2}, decode_router: {kind: least_kv}}",
)
DISAGG_FIELDS = (
    "cluster.groups.0.role",
    "cluster.groups.1.count",
    "disaggregation.link.kind",
    "disaggregation.link.bandwidth_bytes_per_s",
    "disaggregation.link.latency_s",
    "disaggregation.link.efficiency_frac",
    "disaggregation.decode_router",
    "disaggregation.nodes",
    "disaggregation.nodes.gpus_per_node",
    "disaggregation.nodes.prefer_local",
)
# speculative decoding's fields, over an EAGLE head and over a draft model
SPEC_BASE = ("speculative={kind: eagle, num_speculative_tokens: 3, acceptance_rate: 0.8}",)
DRAFT_BASE = (
    "speculative={kind: draft_model, draft_model: Llama-3.1-8B, num_speculative_tokens: 3, acceptance_rate: 0.8}",
)
SPEC_FIELDS = ("speculative.kind", "speculative.num_speculative_tokens", "speculative.acceptance_rate")
CASES = (
    [((), field) for field in FIELDS]
    + [(SPEC_BASE, field) for field in SPEC_FIELDS]
    + [(DRAFT_BASE, "speculative.draft_model")]
    + [(LIFECYCLE_BASE, field) for field in LIFECYCLE_FIELDS]
    + [(DISAGG_BASE, field) for field in DISAGG_FIELDS]
)


@pytest.mark.parametrize("value", VALUES)
@pytest.mark.parametrize(("base", "field"), CASES, ids=[field for _, field in CASES])
def test_hostile_value_is_answered_in_one_line(
    hostile_dir: Path, base: tuple[str, ...], field: str, value: str
) -> None:
    sets = [arg for setting in (*base, f"{field}={value}") for arg in ("--set", setting)]
    result = cli("run", "tiny.yaml", "--out", "out", "--quiet", *sets)
    assert_answered(result)
    out = hostile_dir / "out"
    if result.exit_code == 0:
        assert (out / "summary.json").is_file() and not (out / "INCOMPLETE").exists()
        assert (out / "lifecycle.parquet").is_file() == (base is LIFECYCLE_BASE)
        assert (out / "transfers.parquet").is_file() == (base is DISAGG_BASE)
    else:
        assert not out.exists()  # nothing is written for a scenario that cannot run
