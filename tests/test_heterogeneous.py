"""Heterogeneous clusters: replica groups with their own GPU, TP degree and engine."""

from __future__ import annotations

import copy

import pyarrow.parquet as pq
import pytest
from test_sim import CHAT

from clustersim.errors import ConfigError

MIXED = {
    **CHAT,
    "cluster": {
        "hardware": "H100-SXM",
        "model": "Llama-3.1-8B",
        "groups": [{"count": 2}, {"count": 1, "hardware": "A100-80GB", "tensor_parallel": 2}],
    },
    "stop": {"max_requests": 300},
}


def test_groups_build_replicas_in_order_with_their_own_capacity(run_mapping):
    result = run_mapping(MIXED)
    h100, _, a100 = result.summary["kv_blocks_per_replica"]
    assert result.summary["kv_blocks_per_replica"][0] == result.summary["kv_blocks_per_replica"][1] == h100
    assert a100 > h100  # two A100s hold the 8B model's weights in halves: more KV room than one H100
    steps = pq.read_table(result.out_dir / "steps.parquet").to_pandas()
    per_token_s = steps.groupby("replica").apply(lambda g: g.duration_s.sum() / (g.num_steps * g.num_seqs).sum())
    assert per_token_s[2] > per_token_s[0]  # round robin gives each the same traffic; the A100 pair is slower
    assert result.summary["num_requests"]["completed"] == 300
    assert len(result.summary["replicas"]["busy_frac"]) == 3


def test_group_errors_name_the_group(run_mapping):
    raw = copy.deepcopy(MIXED)
    raw["cluster"]["groups"][1]["hardware"] = "A100-80G"
    with pytest.raises(
        ConfigError, match=r"cluster\.groups\[1\]\.hardware: unknown hardware 'A100-80G' \(did you mean"
    ):
        run_mapping(raw)
    raw = copy.deepcopy(MIXED)
    raw["cluster"]["groups"][1]["tensor_parallel"] = 3
    with pytest.raises(ConfigError, match=r"cluster\.groups\[1\]\.tensor_parallel: 3 does not divide"):
        run_mapping(raw)
    raw = copy.deepcopy(MIXED)
    raw["cluster"]["num_replicas"] = 4
    with pytest.raises(ConfigError, match=r"cluster: num_replicas \(4\) differs from the groups' total count \(3\)"):
        run_mapping(raw)
