"""Swap preemption: a preempted sequence's blocks go to host memory over PCIe and come back, no recompute."""

from __future__ import annotations

import pytest
from conftest import explicit_scenario, read_requests, read_steps

from clustersim.config.catalogue import Catalogue

BLOCK_BYTES = 4 * 131_072  # 4-token blocks of Llama-3.1-8B
PCIE_BYTES_PER_S = Catalogue.builtin().hardware("H100-SXM").pcie_bandwidth_bytes_per_s.value  # type: ignore[union-attr]


def pressure(**kv):
    # 6 blocks of 4 tokens; two sequences of 8 + 10 tokens need 5 blocks each at the end (as in the recompute trace)
    return explicit_scenario([(0.0, 8, 10), (0.0, 8, 10)], kv={"block_size_tokens": 4, "num_blocks": 6, **kv})


@pytest.mark.parametrize("fast_forward", [True, False])
def test_swapped_sequence_resumes_without_recompute(run_mapping, fast_forward):
    result = run_mapping({**pressure(preemption="swap"), "simulation": {"fast_forward": fast_forward}})
    rows = read_requests(result)
    transfer_s = 3 * BLOCK_BYTES / PCIE_BYTES_PER_S  # request 1 holds 3 blocks (12 tokens) when swapped out
    # step 5 swaps request 1 out, step 10 swaps it back in: each step also carries the copy
    assert rows[0]["finished_at_s"] == pytest.approx(10.0 + transfer_s)
    assert rows[1]["finished_at_s"] == pytest.approx(15.0 + 2 * transfer_s)
    assert [r["num_preemptions"] for r in rows] == [0, 1]
    # no recompute: the only prefill is the first one
    assert [s["num_prefill_tokens"] for s in read_steps(result) if s["num_prefill_tokens"]] == [16]
    assert result.summary["kv"]["num_swaps"] == 1


def test_without_host_room_it_falls_back_to_recompute(run_mapping):
    result = run_mapping(pressure(preemption="swap", host_swap_bytes=0))
    assert [s["num_prefill_tokens"] for s in read_steps(result) if s["num_prefill_tokens"]] == [16, 13]
    assert result.summary["kv"]["num_swaps"] == 0
