"""Disaggregated prefill and decode: exact small traces, the link's arithmetic, and the config's rules.

Unit cost (every step 1 s), one prefill replica (0) and one decode replica (1), Llama-3.1-8B with a
16-bit KV cache (131,072 bytes a token), a link moving 10 tokens' KV a second with a 0.5 s latency:
a 20-token prompt's KV cache takes 2.5 s from its start to its landing.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pyarrow.parquet as pq
import pytest
from conftest import explicit_scenario, read_requests, read_steps

from clustersim.config.disagg import Link, node_of
from clustersim.config.loader import scenario_from_mapping
from clustersim.disagg import transfer_times_s
from clustersim.errors import ConfigError
from clustersim.runner import RunResult

Run = Callable[[dict[str, Any]], RunResult]
KV_BYTES_PER_TOKEN = 2 * 32 * 8 * 128 * 2  # K and V, 32 layers, 8 KV heads of 128, 2 bytes
LINK = {"kind": "roce", "bandwidth_bytes_per_s": 10 * KV_BYTES_PER_TOKEN, "efficiency_frac": 1.0, "latency_s": 0.5}
POOLS = {"groups": [{"count": 1, "role": "prefill"}, {"count": 1, "role": "decode"}]}


def disaggregated(requests: list[tuple[float, int, int]], **extra: Any) -> dict[str, Any]:
    extra["cluster"] = {**POOLS, **extra.get("cluster", {})}
    return explicit_scenario(requests, disaggregation={"link": LINK}, **extra)


def transfers(result: RunResult) -> list[dict[str, Any]]:
    return pq.read_table(result.out_dir / "transfers.parquet").to_pylist()


def moments(row: dict[str, Any]) -> tuple[float, ...]:
    return (row["prefilled_at_s"], row["pulled_at_s"], row["started_at_s"], row["landed_at_s"])


@pytest.mark.parametrize("fast_forward", [True, False])
def test_two_requests_prefill_move_and_decode_on_their_own_pools(run_mapping: Run, fast_forward: bool) -> None:
    # request 0 (20 prompt, 3 out): prefill [0, 1]; pulled at 1, on the wire [1, 3], landed 3.5; its
    # last prompt token [3.5, 4.5] gives its first token, then 5.5 and 6.5.
    # request 1 (10 prompt, 1 out, arrives 0.5): prefill [1, 2]; pulled at 2 but the link is busy
    # until 3: wire [3, 4], landed 4.5; its last prompt token runs beside request 0's decode in
    # [4.5, 5.5], which samples its only token.
    result = run_mapping(disaggregated([(0.0, 20, 3), (0.5, 10, 1)], simulation={"fast_forward": fast_forward}))
    first, second = read_requests(result)
    assert (first["replica"], first["first_token_at_s"], first["finished_at_s"]) == (1, 4.5, 6.5)
    assert (second["replica"], second["first_token_at_s"], second["finished_at_s"]) == (1, 5.5, 5.5)
    assert (first["first_scheduled_at_s"], second["first_scheduled_at_s"]) == (0.0, 1.0)  # on the prefill replica
    rows = transfers(result)
    assert [(r["request_id"], r["prefill_replica"], r["decode_replica"], r["kv_tokens"]) for r in rows] == [
        (0, 0, 1, 20),
        (1, 0, 1, 10),
    ]
    assert [moments(r) for r in rows] == [(1.0, 1.0, 1.0, 3.5), (2.0, 2.0, 3.0, 4.5)]
    assert rows[0]["kv_bytes"] == 20 * KV_BYTES_PER_TOKEN
    steps = read_steps(result)
    # the prefill replica emits no token; the decode replica computes one prompt token per request
    assert [(s["replica"], s["started_at_s"], s["num_prefill_tokens"], s["num_emitted_tokens"]) for s in steps][:4] == [
        (0, 0.0, 20, 0),
        (0, 1.0, 10, 0),
        (1, 3.5, 1, 1),
        (1, 4.5, 1, 2),
    ]
    moved = result.summary["disaggregation"]
    assert (moved["num_transfers"], moved["kv_transferred_bytes"]) == (2, 30 * KV_BYTES_PER_TOKEN)
    assert moved["link_wait_s"]["max"] == 1.0
    assert moved["transfer_s"]["max"] == 2.5
    # busy: the prefill replica for 2 of its 6.5 s, the decode replica for 3 of them
    assert moved["prefill_pool"] == {"num_replicas": 1, "mean_busy_frac": 2 / 6.5, "mean_batch_seqs": 1.0}
    assert moved["decode_pool"]["mean_busy_frac"] == pytest.approx(3 / 6.5)


@pytest.mark.parametrize("fast_forward", [True, False])
def test_a_full_decode_replica_holds_the_prefill_replicas_blocks_and_that_holds_its_next_prompt(
    run_mapping: Run, fast_forward: bool
) -> None:
    # 24 one-token blocks each side, no watermark. Request 0 (20 prompt, 3 out) lands at 3.5 and
    # decodes until 6.5 on the decode replica, holding 20-22 blocks there. Request 1 (10 prompt)
    # cannot be admitted on the prefill replica while request 0's 20 blocks wait for their pull, so
    # it prefills only once they have landed: [3.5, 4.5]. Its 10 blocks then wait for the decode
    # replica, which takes them when request 0 has finished (6.5): wire [6.5, 7.5], landed 8.0,
    # first (and only) token at 9.0.
    kv = {"block_size_tokens": 1, "num_blocks": 24, "watermark_frac": 0.0}
    result = run_mapping(disaggregated([(0.0, 20, 3), (0.5, 10, 1)], kv=kv, simulation={"fast_forward": fast_forward}))
    first, second = read_requests(result)
    assert first["finished_at_s"] == 6.5
    assert (second["first_scheduled_at_s"], second["first_token_at_s"]) == (3.5, 9.0)
    assert [moments(r) for r in transfers(result)] == [(1.0, 1.0, 1.0, 3.5), (4.5, 6.5, 6.5, 8.0)]
    memory = pq.read_table(result.out_dir / "memory.parquet").to_pylist()
    # the prefill replica's step [3.5, 4.5] ends holding request 1's 10 blocks for its transfer
    prefill_rows = [m for m in memory if m["replica"] == 0]
    assert prefill_rows[-1]["in_flight_bytes"] == 10 * KV_BYTES_PER_TOKEN
    assert result.summary["disaggregation"]["decode_wait_s"]["max"] == 2.0


def test_a_run_stopped_mid_transfer_keeps_the_request_unfinished_and_the_transfer_open(run_mapping: Run) -> None:
    result = run_mapping(disaggregated([(0.0, 20, 3)], stop={"horizon_s": 2.0}))
    (request,) = read_requests(result)
    assert request["status"] == "unfinished"
    (row,) = transfers(result)
    assert moments(row)[:3] == (1.0, 1.0, 1.0) and math.isnan(row["landed_at_s"])
    assert result.summary["disaggregation"]["num_unlanded"] == 1


def test_a_prompt_the_decode_replica_can_never_hold_is_rejected_there_and_freed_on_the_prefill_side(
    run_mapping: Run,
) -> None:
    # Llama-3.1-70B: TP4 prefill replicas have room for far more KV than TP2 decode replicas
    pools = {
        "model": "Llama-3.1-70B",
        "groups": [
            {"count": 1, "role": "prefill", "tensor_parallel": 4},
            {"count": 1, "role": "decode", "tensor_parallel": 2},
        ],
    }
    probe = run_mapping(disaggregated([(0.0, 16, 1)], cluster=pools, kv={"num_blocks": None}))
    prefill_blocks, decode_blocks = probe.summary["kv_blocks_per_replica"]
    assert decode_blocks < prefill_blocks
    too_long = decode_blocks * 16 + 1  # one block more than the decode replica has
    result = run_mapping(
        disaggregated(
            [(0.0, too_long, 1), (0.5, 16, 1), (10.0, 16, 1)], cluster=pools, kv={"num_blocks": None}, policy="vllm_v1"
        )
    )
    rejected, served, _ = read_requests(result)
    assert (rejected["status"], rejected["replica"]) == ("rejected", 1)
    assert "KV" in rejected["reject_reason"]
    assert served["status"] == "completed"
    rows = transfers(result)
    assert rows[0]["request_id"] == 0 and math.isnan(rows[0]["pulled_at_s"])
    assert result.summary["disaggregation"]["num_unlanded"] == 1
    # the prefill replica let the rejected prompt's blocks go: when request 2's prompt is done there,
    # only its own block (16 tokens of Llama-3.1-70B's 327,680 KV bytes each) waits to be sent
    prefill_rows = [m for m in pq.read_table(result.out_dir / "memory.parquet").to_pylist() if m["replica"] == 0]
    assert prefill_rows[-1]["in_flight_bytes"] == 16 * 327_680


@pytest.mark.parametrize(
    ("now_s", "send_free_s", "receive_free_s", "expected"),
    [
        (1.0, 0.0, 0.0, (1.0, 3.0, 3.5)),  # both ends free: at once
        (1.0, 2.0, 0.0, (2.0, 4.0, 4.5)),  # the sender is busy until 2
        (1.0, 0.0, 5.0, (5.0, 7.0, 7.5)),  # the receiver is busy until 5
    ],
)
def test_a_transfer_starts_when_both_ends_are_free(
    now_s: float, send_free_s: float, receive_free_s: float, expected: tuple[float, float, float]
) -> None:
    assert transfer_times_s(now_s, send_free_s, receive_free_s, 200.0, 100.0, 0.5) == expected


@pytest.mark.parametrize(
    ("link", "bytes_per_s"),
    [
        ({"kind": "infiniband"}, 50e9 * 0.72),
        ({"kind": "nvlink"}, 450e9 * 0.72),
        ({"kind": "roce", "efficiency_frac": 1.0}, 25e9),
        ({"kind": "pcie", "bandwidth_bytes_per_s": 1e9, "efficiency_frac": 0.5}, 0.5e9),
    ],
)
def test_link_presets_and_overrides(link: dict[str, Any], bytes_per_s: float) -> None:
    assert Link.model_validate(link).per_gpu_bytes_per_s() == pytest.approx(bytes_per_s)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda raw: raw.pop("disaggregation"), "add a disaggregation section"),
        (lambda raw: raw["cluster"]["groups"].pop(), "role: prefill and groups with role: decode"),
        (
            lambda raw: raw.update(autoscaler={"kind": "queue_length", "target_outstanding_per_replica": 4}),
            "autoscaler: a disaggregated scenario scales each pool on its own; move it to disaggregation.autoscaler",
        ),
        (
            lambda raw: raw["disaggregation"].update(autoscaler={}),
            "disaggregation.autoscaler: set an autoscaler for the prefill pool, the decode pool or both",
        ),
        (
            lambda raw: raw["disaggregation"].update(autoscaler={"decode": {"kind": "kv_use", "target_kv_use": 0.5}}),
            "disaggregation.autoscaler.decode.target_kv_use: unknown field (did you mean 'target_kv_used_frac'?)",
        ),
        (
            lambda raw: raw["disaggregation"].update(
                autoscaler={"decode": {"kind": "slo", "ttft_s": 1.0, "min_replicas": 2}}
            ),
            "disaggregation.autoscaler.decode.min_replicas: 2 is more than the decode pool's 1 replicas",
        ),
        (
            lambda raw: raw["disaggregation"].update(autoscaler={"prefill": {"kind": "slo"}}),
            "disaggregation.autoscaler.prefill: kind slo needs a target: set ttft_s, tpot_s or both",
        ),
        (lambda raw: raw["scheduler"].update(slo_admission="shed"), "scheduler.slo_admission: not supported"),
        (lambda raw: raw["disaggregation"]["link"].update(kind="ethernet"), "'nvlink', 'infiniband', 'roce'"),
        (lambda raw: raw["disaggregation"]["link"].update(efficiency_frac=1.5), "less than or equal to 1"),
    ],
)
def test_config_errors(change: Callable[[dict[str, Any]], Any], message: str) -> None:
    raw = disaggregated([(0.0, 20, 3)])
    raw["cluster"] = {**raw["cluster"], "groups": [dict(g) for g in POOLS["groups"]]}
    raw["disaggregation"] = {"link": dict(LINK)}
    change(raw)
    with pytest.raises(ConfigError) as caught:
        scenario_from_mapping(raw, "d.yaml")
    assert message in str(caught.value)


NODE_POOLS = {"groups": [{"count": 1, "role": "prefill"}, {"count": 2, "role": "decode"}]}
NVLINK = {"kind": "nvlink", "bandwidth_bytes_per_s": 20 * KV_BYTES_PER_TOKEN, "efficiency_frac": 1.0, "latency_s": 0.1}


@pytest.mark.parametrize("prefer_local", [True, False])
def test_replicas_on_one_node_move_kv_over_its_link_and_the_router_may_prefer_them(
    run_mapping: Run, prefer_local: bool
) -> None:
    # two GPUs a node: prefill 0 and decode 1 share node 0, decode 2 is alone on node 1. The node's link
    # moves 20 tokens a second (0.1 s latency), the link between nodes 10 (0.5 s). Request 0 (20 tokens)
    # goes to decode 1 either way: on the node's link [1, 2], landed 2.1, first token 3.1. Request 1
    # (10 tokens, prefilled [1, 2]) goes to decode 1 again if the router prefers the node (its link
    # free at 2: landed 2.6, seated when decode 1's step ends at 3.1: first token 4.1); round robin
    # sends it to decode 2 across nodes: [2, 3], landed 3.5, first token 4.5.
    nodes = {"gpus_per_node": 2, "link": NVLINK, "prefer_local": prefer_local}
    raw = disaggregated([(0.0, 20, 1), (0.5, 10, 1)], cluster=NODE_POOLS)
    raw["disaggregation"] = {"link": LINK, "nodes": nodes, "decode_router": {"kind": "round_robin"}}
    result = run_mapping(raw)
    first, second = read_requests(result)
    rows = transfers(result)
    assert (first["replica"], first["first_token_at_s"]) == (1, 3.1)
    assert moments(rows[0]) == (1.0, 1.0, 1.0, 2.1)
    if prefer_local:
        assert (second["replica"], second["first_token_at_s"]) == (1, 4.1)
        assert moments(rows[1]) == (2.0, 2.0, 2.0, 2.6)
    else:
        assert (second["replica"], second["first_token_at_s"]) == (2, 4.5)
        assert moments(rows[1]) == (2.0, 2.0, 2.0, 3.5)


@pytest.mark.parametrize(
    ("gpus", "per_node", "nodes"),
    [
        ([1, 1, 1, 1], 2, [0, 0, 1, 1]),
        ([4, 4, 4], 8, [0, 0, 1]),
        ([3, 3, 3], 8, [0, 0, 1]),  # the third does not fit in the 2 GPUs left
        ([2, 8, 1], 4, [0, 1, 3]),  # the 8-GPU replica takes nodes 1 and 2 of its own
    ],
)
def test_replicas_are_packed_onto_nodes_in_order(gpus: list[int], per_node: int, nodes: list[int]) -> None:
    assert node_of(gpus, per_node) == nodes
