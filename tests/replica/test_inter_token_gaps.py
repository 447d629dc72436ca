"""Inter-token gaps on timelines worked out by hand (unit cost: every step lasts 1 s)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from conftest import explicit_scenario, read_requests

from clustersim.logstats import gap_bins_of


def gaps_of(result) -> dict[float, int]:
    """``{gap: how many}`` over every tenant's bins (each bin here holds one value)."""
    counts: dict[float, int] = {}
    for bins in gap_bins_of(result.out_dir / "itl.parquet").values():
        for count, _, low_s, high_s in bins.values():
            assert low_s == high_s
            counts[low_s] = counts.get(low_s, 0) + int(count)
    return counts


@pytest.mark.parametrize("fast_forward", [True, False])
def test_a_prefill_only_step_pauses_the_decodes(run_mapping, fast_forward: bool) -> None:
    # A: prefill [0,1] (token 1 at 1), decodes end at 2, 3; B arrives at 2.5 and vllm (V0) runs its
    # prefill alone in [3,4] (B's token 1 at 4) while A waits; both decode at 5 and 6.
    raw = explicit_scenario([(0.0, 8, 5), (2.5, 8, 3)], policy="vllm_v0", simulation={"fast_forward": fast_forward})
    result = run_mapping(raw)
    a, b = read_requests(result)
    assert a["finished_at_s"] == 6.0 and b["finished_at_s"] == 6.0
    assert a["max_itl_s"] == 2.0 and b["max_itl_s"] == 1.0
    assert gaps_of(result) == {1.0: 5, 2.0: 1}  # A: 1, 1, 2, 1; B: 1, 1
    itl = result.summary["itl_s"]
    assert itl["max"] == 2.0 and itl["p50"] == 1.0 and itl["num_gaps"] == 6
    assert itl["mean"] == pytest.approx(7 / 6)
    assert result.summary["tpot_s"]["p50"] == pytest.approx(1.125)  # TPOT hides the 2 s gap: A's (6-1)/4


def test_mixing_the_prefill_into_the_decode_step_keeps_gaps_even(run_mapping) -> None:
    # continuous batching runs B's prefill together with A's decode: no gap above a step
    result = run_mapping(explicit_scenario([(0.0, 8, 5), (2.5, 8, 3)], policy="continuous"))
    assert set(gaps_of(result)) == {1.0}
    assert [r["max_itl_s"] for r in read_requests(result)] == [1.0, 1.0]


def test_single_token_requests_have_no_gap(run_mapping) -> None:
    result = run_mapping(explicit_scenario([(0.0, 8, 1), (0.0, 8, 1)]))
    assert [r["max_itl_s"] for r in read_requests(result)] == [None, None]
    assert result.summary["itl_s"]["num_gaps"] == 0 and result.summary["itl_s"]["p99"] is None


@pytest.mark.parametrize("fast_forward", [True, False])
def test_a_recomputed_request_sees_the_gap_of_its_preemption(run_mapping, fast_forward: bool) -> None:
    # two requests grow until a 6-block pool (block 4 tokens) runs out; the newer one is preempted
    # and recomputed: its gap spans the preemption, and every token after a first is still one gap
    raw = explicit_scenario(
        [(0.0, 4, 12), (0.0, 4, 12)],
        kv={"block_size_tokens": 4, "num_blocks": 6},
        simulation={"fast_forward": fast_forward},
    )
    result = run_mapping(raw)
    rows = read_requests(result)
    assert sum(r["num_preemptions"] for r in rows) >= 1
    preempted = next(r for r in rows if r["num_preemptions"])
    assert preempted["max_itl_s"] > 1.0
    assert result.summary["itl_s"]["num_gaps"] == sum(r["output_tokens"] - 1 for r in rows)
    total_s = sum(row[1] for bins in gap_bins_of(result.out_dir / "itl.parquet").values() for row in bins.values())
    assert total_s == pytest.approx(sum(r["finished_at_s"] - r["first_token_at_s"] for r in rows))


def test_itl_slo_per_request_and_at_a_percentile(run_mapping) -> None:
    raw = explicit_scenario([(0.0, 8, 5), (2.5, 8, 3)], policy="vllm_v0", slo={"itl_s": 1.5, "percentile": 50})
    slo = run_mapping(raw).summary["slo"]
    assert slo["num_met"] == 1  # A's 2 s gap misses; B's gaps are all 1 s
    assert slo["percentile_values"]["itl_s"] == 1.0 and slo["percentile_met"] is True
    columns = pq.read_schema(run_mapping(raw).out_dir / "itl.parquet").names
    assert columns[:2] == ["tenant", "bin"]
