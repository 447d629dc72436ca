"""Prompts cut from numbered documents: equal-index requests share leading blocks, and what earlier
benchmark runs sent is in the prefix cache at the start (as far as it fits, oldest evicted first)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import read_requests

from clustersim.config.workload import Tenant
from clustersim.errors import ConfigError
from clustersim.workload.documents import (
    DOCUMENT_IDS_BASE,
    IDS_PER_DOCUMENT,
    document_block_ids,
    prompt_ids,
    warm_segments,
)

BLOCK = 16


def scenario(
    prompts: list[int], outputs: list[int], earlier: list[dict[str, list[int]]] | None = None, **kv: Any
) -> dict[str, Any]:
    tenant: dict[str, Any] = {
        "name": "bench",
        "arrival": {"kind": "closed_loop", "num_users": 1, "think_time": {"kind": "fixed", "time_s": 0.0}},
        "prompt_tokens": {"kind": "empirical", "values": prompts, "order": "sequence"},
        "output_tokens": {"kind": "empirical", "values": outputs, "order": "sequence"},
        "documents": {"earlier_runs": earlier or []},
    }
    return {
        "name": "docs",
        "workload": {"tenants": [tenant]},
        "cluster": {"hardware": "H100-SXM", "model": "Llama-3.1-8B"},
        "scheduler": {"policy": "vllm_v1", "max_num_seqs": 8, "max_num_batched_tokens": 8192},
        "kv": {"prefix_caching": True, "block_size_tokens": BLOCK, "prefix_block_tokens": BLOCK, **kv},
        "cost": {"kind": "unit", "step_time_s": 0.01},
        "stop": {"max_requests": len(prompts)},
    }


def test_block_ids_are_shared_by_equal_documents_only():
    a = document_block_ids(0, 3, 5)
    assert document_block_ids(0, 3, 2) == a[:2]  # a shorter cut of the same document: its leading ids
    assert not set(a) & set(document_block_ids(0, 4, 5))  # another document
    assert not set(a) & set(document_block_ids(1, 3, 5))  # another tenant's document 3
    assert all(i <= DOCUMENT_IDS_BASE for i in a)  # far below conversations' ids (-1 down) and traces' (>= 0)
    assert prompt_ids(0, 3, 5 * BLOCK + 7, BLOCK) == a  # whole segments only
    with pytest.raises(ValueError, match="exceeds"):
        document_block_ids(0, 0, IDS_PER_DOCUMENT + 1)


def test_warm_segments_lay_out_prompts_then_the_rest_oldest_first():
    tenant = Tenant.model_validate(
        {
            "name": "t",
            "arrival": {"kind": "poisson", "rate_per_s": 1.0},
            "prompt_tokens": {"kind": "fixed", "tokens": 10},
            "output_tokens": {"kind": "fixed", "tokens": 10},
            "documents": {"earlier_runs": [{"prompt_tokens": [40, 8], "output_tokens": [10, 0]}]},
        }
    )
    segments = warm_segments([tenant], BLOCK, BLOCK)
    ids = document_block_ids(0, 0, 2)
    # document 0: 40 + 10 tokens = 4 blocks less its 2 whole prompt segments, then those segments last
    # first (a full cache evicts a prompt from its end); document 1: 8 tokens, one block of its own
    assert segments == (
        (("earlier", 0, 0, 0), 2),
        (("hash", ids[1]), 1),
        (("hash", ids[0]), 1),
        (("earlier", 0, 0, 1), 1),
    )


def test_requests_find_what_earlier_runs_sent_of_their_document(run_mapping):
    earlier = [{"prompt_tokens": [200, 40, 1000], "output_tokens": [50, 50, 5]}]
    rows = read_requests(run_mapping(scenario([300, 100, 500, 64], [4, 4, 4, 4], earlier)))
    # doc 0: 200 of 300 (12 whole blocks); doc 1: 40 of 100 -> 2 blocks; doc 2: all but the last block
    # (one token is always computed); doc 3 was never sent
    assert [r["num_cached_prompt_tokens"] for r in rows] == [192, 32, 496, 0]


def test_without_earlier_runs_nothing_is_cached(run_mapping):
    rows = read_requests(run_mapping(scenario([300, 100], [4, 4])))
    assert [r["num_cached_prompt_tokens"] for r in rows] == [0, 0]


def test_a_full_cache_evicts_the_oldest_prompts_from_their_end(run_mapping):
    """Two earlier runs leave 43 blocks (document 0: 20 prompt blocks and one of output; document 1 the
    same, one run later; one block of the second run's 1-token document 0) in a 30-block cache: the
    oldest 13 go, document 0's own block and its last 12 prompt blocks, so its first 8 stay (128
    tokens). Request 0 then needs 13 blocks beyond them: the second run's two own blocks and document
    1's last 11 go, and request 1 finds document 1's first 9 (144 tokens)."""
    earlier = [
        {"prompt_tokens": [320], "output_tokens": [16]},
        {"prompt_tokens": [1, 320], "output_tokens": [0, 16]},
    ]
    rows = read_requests(run_mapping(scenario([320, 320], [4, 4], earlier, num_blocks=30)))
    assert [r["num_cached_prompt_tokens"] for r in rows] == [128, 144]


def test_the_kth_draw_reads_document_k_whatever_user_sends_it(run_mapping):
    raw = scenario([160, 160, 160, 160], [30, 1, 1, 1], [{"prompt_tokens": [1, 1, 1, 160], "output_tokens": [0] * 4}])
    raw["workload"]["tenants"][0]["arrival"]["num_users"] = 2
    rows = read_requests(run_mapping(raw))
    assert [(r["prompt_tokens"], r["num_cached_prompt_tokens"]) for r in rows][3] == (160, 144)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"earlier_runs": [{"prompt_tokens": [1, 2], "output_tokens": [1]}]}, "one output length per prompt"),
        ({"earlier_runs": [{"prompt_tokens": [0], "output_tokens": [1]}]}, "greater than 0"),
    ],
)
def test_bad_documents_are_config_errors(change, message):
    from clustersim.config.loader import scenario_from_mapping

    raw = scenario([10], [1])
    raw["workload"]["tenants"][0]["documents"] = change
    with pytest.raises(ConfigError, match=message):
        scenario_from_mapping(raw, "docs.yaml")


@pytest.mark.parametrize(
    ("tenant", "message"),
    [
        ({"shared_prefix_tokens": 16}, "exclude each other"),
        (
            {
                "arrival": {
                    "kind": "closed_loop",
                    "num_users": 1,
                    "think_time": {"kind": "fixed", "time_s": 0},
                    "turns_per_conversation": 2,
                }
            },
            "exclude each other",
        ),
    ],
)
def test_documents_exclude_other_prompt_sharing(tenant, message):
    from clustersim.config.loader import scenario_from_mapping

    raw = scenario([10], [1])
    raw["workload"]["tenants"][0].update(tenant)
    with pytest.raises(ConfigError, match=message):
        scenario_from_mapping(raw, "docs.yaml")


def test_earlier_runs_without_prefix_caching_is_a_one_line_error(tmp_path: Path):
    raw = scenario([10], [1], [{"prompt_tokens": [10], "output_tokens": [1]}])
    raw["kv"] = {"prefix_caching": False}
    path = tmp_path / "docs.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "clustersim", "run", str(path), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "workload.tenants[0].documents.earlier_runs" in lines[0] and "kv.prefix_caching: true" in lines[0]


def test_an_open_loop_tenants_kth_arrival_reads_document_k(run_mapping):
    raw = scenario([300, 100, 500], [4, 4, 4], [{"prompt_tokens": [200, 1, 1000], "output_tokens": [1, 1, 1]}])
    raw["workload"]["tenants"][0]["arrival"] = {"kind": "poisson", "rate_per_s": 0.5}
    rows = read_requests(run_mapping(raw))
    assert [r["num_cached_prompt_tokens"] for r in rows] == [192, 0, 496]
