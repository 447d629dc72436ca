"""Prefix caching in the replica: reuse skips prefill, cached blocks are accounted, LRU eviction frees room."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from conftest import explicit_scenario, read_requests, read_steps

KV_BYTES_PER_TOKEN = 131_072


def with_tenants(requests_a, requests_b=(), shared_a=32, **overrides):
    raw = explicit_scenario(list(requests_a), **overrides)
    tenant_a = {**raw["workload"]["tenants"][0], "name": "a", "shared_prefix_tokens": shared_a}
    tenants = [tenant_a]
    if requests_b:
        tenants.append(
            {
                "name": "b",
                "arrival": {
                    "kind": "explicit",
                    "requests": [{"arrival_at_s": t, "prompt_tokens": p, "output_tokens": o} for t, p, o in requests_b],
                },
            }
        )
    raw["workload"] = {"tenants": tenants}
    return raw


@pytest.mark.parametrize("fast_forward", [True, False])
def test_a_shared_system_prompt_is_prefilled_once(run_mapping, fast_forward):
    raw = with_tenants(
        [(0.0, 40, 2), (5.0, 40, 2)],
        kv={"block_size_tokens": 16, "num_blocks": 100, "prefix_caching": True},
        simulation={"fast_forward": fast_forward},
    )
    result = run_mapping(raw)
    rows = read_requests(result)
    assert [r["num_cached_prompt_tokens"] for r in rows] == [0, 32]
    # the second request prefills only the 8 tokens after the cached 32-token system prompt
    assert [s["num_prefill_tokens"] for s in read_steps(result) if s["num_prefill_tokens"]] == [40, 8]
    assert result.summary["kv"]["prefix_hit_rate"] == pytest.approx(32 / 80)
    ledger = pq.read_table(result.out_dir / "memory.parquet").to_pylist()
    second_prefill = next(r for r in ledger if r["started_at_s"] == 5.0)
    assert second_prefill["cached_prefix_bytes"] / KV_BYTES_PER_TOKEN == 32  # two cached blocks
    assert second_prefill["stored_bytes"] / KV_BYTES_PER_TOKEN == 8  # its own tokens
    assert second_prefill["internal_frag_bytes"] / KV_BYTES_PER_TOKEN == 8  # its own block holds 8 of 16


def test_unused_cached_blocks_are_evicted_to_admit_a_request(run_mapping):
    # 4 blocks: after request 0 the cache holds its 2-block system prompt; request 1 (tenant b) needs all 4
    raw = with_tenants(
        [(0.0, 40, 2)],
        [(5.0, 60, 2)],
        kv={"block_size_tokens": 16, "num_blocks": 4, "prefix_caching": True},
    )
    result = run_mapping(raw)
    rows = read_requests(result)
    assert [r["status"] for r in rows] == ["completed", "completed"]
    assert rows[1]["first_scheduled_at_s"] == 5.0  # admitted at once, by evicting the cached prefix
    assert result.summary["replicas"]["num_preemptions"] == 0


def test_prefix_caching_needs_paged_blocks(run_mapping):
    with pytest.raises(Exception, match="prefix_caching needs allocator: paged"):
        run_mapping(with_tenants([(0.0, 40, 2)], kv={"allocator": "contiguous", "prefix_caching": True}))


def test_prefix_caching_needs_an_iteration_level_policy(run_mapping):
    with pytest.raises(Exception, match=r"kv\.prefix_caching: needs an iteration-level policy"):
        run_mapping(with_tenants([(0.0, 40, 2)], policy="static", kv={"prefix_caching": True}))


@pytest.mark.parametrize("fast_forward", [True, False])
def test_a_prefix_is_reusable_as_soon_as_it_is_computed(run_mapping, fast_forward):
    # A (40 tokens, 32 of them the system prompt) prefills at t=0 and decodes for 9 more steps; B arrives
    # at t=2 while A still runs and reuses the system prompt A computed (vLLM caches a block once full)
    raw = with_tenants(
        [(0.0, 40, 10), (2.0, 40, 2)],
        kv={"block_size_tokens": 16, "num_blocks": 100, "prefix_caching": True},
        simulation={"fast_forward": fast_forward},
    )
    result = run_mapping(raw)
    rows = read_requests(result)
    assert [r["num_cached_prompt_tokens"] for r in rows] == [0, 32]
    assert [s["num_prefill_tokens"] for s in read_steps(result) if s["num_prefill_tokens"]] == [40, 8]
    ledger = pq.read_table(result.out_dir / "memory.parquet").to_pylist()
    first = ledger[0]  # after A's prefill: its system prompt is already cached, its own 8 tokens are stored
    assert first["cached_prefix_bytes"] / KV_BYTES_PER_TOKEN == 32
    assert first["stored_bytes"] / KV_BYTES_PER_TOKEN == 8


@pytest.mark.parametrize("fast_forward", [True, False])
def test_two_prompts_computing_one_prefix_together_keep_one_copy(run_mapping, fast_forward):
    # both prefill the system prompt in the same step; the second's copy is freed once the first caches it
    raw = with_tenants(
        [(0.0, 40, 4), (0.0, 40, 4), (3.0, 40, 2)],
        kv={"block_size_tokens": 16, "num_blocks": 100, "prefix_caching": True},
        simulation={"fast_forward": fast_forward},
    )
    result = run_mapping(raw)
    assert [r["num_cached_prompt_tokens"] for r in read_requests(result)] == [0, 0, 32]
    steps = read_steps(result)
    # 2 cached blocks + A and B's own block each (+ growth), never two copies of the prompt after step 0
    assert steps[1]["kv_used_blocks"] == 2 + 2


def conversation(turns: int, **arrival) -> dict:
    raw = explicit_scenario(
        [(0.0, 8, 2)],
        kv={"block_size_tokens": 16, "num_blocks": 200, "prefix_caching": True, "prefix_block_tokens": 16},
    )
    raw["workload"] = {
        "tenants": [
            {
                "name": "chat",
                "arrival": {
                    "kind": "closed_loop",
                    "num_users": 1,
                    "think_time": {"kind": "fixed", "time_s": 0.0},
                    "turns_per_conversation": turns,
                    **arrival,
                },
                "prompt_tokens": {"kind": "fixed", "tokens": 20},
                "output_tokens": {"kind": "fixed", "tokens": 12},
            }
        ]
    }
    raw["stop"] = {"max_requests": 4}
    return raw


@pytest.mark.parametrize("fast_forward", [True, False])
def test_each_turn_of_a_conversation_reuses_the_history_cached_so_far(run_mapping, fast_forward):
    # turn prompts 20, 32 + 20, 64 + 20: the KV of turn k holds prompt + 11 output tokens (31, 63), of which
    # the full 16-token blocks (16, 48) are cached for the next turn, as vLLM caches full blocks only
    raw = conversation(3)
    raw["simulation"] = {"fast_forward": fast_forward}
    rows = read_requests(run_mapping(raw))
    assert [r["prompt_tokens"] for r in rows] == [20, 52, 84, 20]  # the 4th starts a new conversation
    assert [r["num_cached_prompt_tokens"] for r in rows] == [0, 16, 48, 0]
    assert all(r["status"] == "completed" for r in rows)


def test_a_conversation_restarts_before_its_context_would_exceed_the_limit(run_mapping):
    rows = read_requests(run_mapping(conversation(10, max_context_tokens=70)))
    # 20 + 12 = 32; 52 + 12 = 64; the third (84 + 12 > 70) starts a new conversation
    assert [r["prompt_tokens"] for r in rows] == [20, 52, 20, 52]


@pytest.mark.parametrize("fast_forward", [True, False])
def test_a_full_cache_evicts_a_finished_prompt_from_its_end(run_mapping, tmp_path, fast_forward):
    """Request A leaves its 10-block prompt cached; B needs 5 of the 12 blocks, so 3 cached ones go: the
    last three of A's prompt (vLLM frees a request's blocks last first; SGLang evicts leaves), and C,
    which repeats A's prompt, still finds its first 7 blocks."""
    lines = [
        {"timestamp": 0, "input_length": 160, "output_length": 1, "hash_ids": list(range(1, 11))},
        {"timestamp": 5000, "input_length": 64, "output_length": 2, "hash_ids": [100, 101, 102, 103]},
        {"timestamp": 10000, "input_length": 160, "output_length": 1, "hash_ids": list(range(1, 11))},
    ]
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    raw = explicit_scenario(
        [],
        policy="vllm_v1",
        kv={"block_size_tokens": 16, "num_blocks": 12, "prefix_caching": True, "prefix_block_tokens": 16},
        simulation={"fast_forward": fast_forward},
    )
    raw["workload"] = {
        "tenants": [{"name": "t", "arrival": {"kind": "trace", "path": "m.jsonl", "format": "mooncake"}}]
    }
    rows = read_requests(run_mapping(raw))
    assert [r["num_cached_prompt_tokens"] for r in rows] == [0, 0, 7 * 16]
