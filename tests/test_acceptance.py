"""Acceptance rates that differ by tenant or by request: each request's share of the decode steps
(clustersim.shares, clustersim.acceptance), hand-computed traces in both modes, the draws, the config."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
from conftest import explicit_scenario, read_requests, read_steps

from clustersim.acceptance import AcceptanceDraws, share_of
from clustersim.config.loader import scenario_from_mapping
from clustersim.config.speculative import BetaAcceptance, Speculative, expected_tokens_per_step
from clustersim.errors import ConfigError
from clustersim.runner import RunResult
from clustersim.shares import FULL_SHARE, gains_at, share_tokens
from clustersim.workload.request import Request

Run = Callable[[dict[str, Any]], RunResult]


def test_a_share_gains_its_fraction_of_the_steps_evenly() -> None:
    assert [share_tokens(d, FULL_SHARE) for d in range(-1, 5)] == [-1, 0, 1, 2, 3, 4]
    half = FULL_SHARE // 2
    assert [share_tokens(d, half) for d in range(-1, 7)] == [-1, 0, 0, 1, 1, 2, 2, 3]
    third = [share_tokens(d, FULL_SHARE // 3) for d in range(3001)]
    assert third[-1] == 3000 * (FULL_SHARE // 3) // FULL_SHARE  # never more than one token a step
    assert all(0 <= b - a <= 1 for a, b in itertools.pairwise(third))


@pytest.mark.parametrize(
    ("tokens", "most", "share"),
    [(2.0, 2.0, FULL_SHARE), (1.0, 2.0, FULL_SHARE // 2), (1.0, 1e9, 1), (3.0, 2.0, FULL_SHARE)],
)
def test_a_share_is_the_pace_over_the_fastest_rounded_and_never_zero(tokens: float, most: float, share: int) -> None:
    assert share_of(tokens, most) == share


def two_tenants(fast_forward: bool, rate_b: Any = 0.0) -> dict[str, Any]:
    """Tenant a accepts every draft (E = 2 at k = 1), tenant b none (E = 1); a unit-cost verify cycle of 1 s."""
    raw = explicit_scenario([(0.0, 10, 5)], speculative={"kind": "ngram", "num_speculative_tokens": 1})
    tenant = raw["workload"]["tenants"][0]
    raw["workload"]["tenants"] = [{**tenant, "name": "a"}, {**tenant, "name": "b"}]
    raw["speculative"] = {**raw["speculative"], "acceptance_rate": 1.0, "tenant_acceptance_rates": {"b": rate_b}}
    raw["simulation"] = {"fast_forward": fast_forward}
    return raw


@pytest.mark.parametrize("fast_forward", [True, False])
def test_two_tenants_each_decode_at_their_own_pace_in_one_batch(run_mapping: Run, fast_forward: bool) -> None:
    # Both prompts share step 0 (1 s, unspeculated): first tokens at 1.0. Decode steps are priced at
    # the fastest pace, half a cycle (0.5 s). a gains a token every step: 4 more by 1 + 4 x 0.5 = 3.0.
    # b has half the share: it gains at steps 2, 4, 6, 8 (D // 2 grows), a token a second, the last
    # at 1 + 8 x 0.5 = 5.0, alone in the batch after 3.0 and still at its own pace of 1 s a token.
    result = run_mapping(two_tenants(fast_forward))
    rows = {row["tenant"]: row for row in read_requests(result)}
    assert rows["a"]["first_token_at_s"] == rows["b"]["first_token_at_s"] == 1.0
    assert rows["a"]["finished_at_s"] == pytest.approx(3.0, rel=1e-12)
    assert rows["b"]["finished_at_s"] == pytest.approx(5.0, rel=1e-12)
    assert rows["a"]["max_itl_s"] == pytest.approx(0.5, rel=1e-12)
    assert rows["b"]["max_itl_s"] == pytest.approx(1.0, rel=1e-12)
    tenants = result.summary["tenants"]
    assert tenants["a"]["itl_s"]["p99"] == pytest.approx(0.5, rel=0.01)
    assert tenants["b"]["itl_s"]["p99"] == pytest.approx(1.0, rel=0.01)
    assert tenants["a"]["itl_s"]["num_gaps"] == tenants["b"]["itl_s"]["num_gaps"] == 4
    spec = result.summary["speculative"]
    assert spec["max_tokens_per_verify_step"] == 2.0
    assert spec["tenants"] == {
        "a": {"acceptance_rate": 1.0, "tokens_per_verify_step": 2.0},
        "b": {"acceptance_rate": 0.0, "tokens_per_verify_step": 1.0},
    }
    # the steps log the tokens made: both at even steps, a alone at odd ones (then b alone)
    assert result.summary["output_tokens"] == 10


def test_one_rate_for_every_tenant_leaves_every_share_full(run_mapping: Run) -> None:
    result = run_mapping(two_tenants(True, rate_b=1.0))
    rows = {row["tenant"]: row for row in read_requests(result)}
    assert rows["a"]["finished_at_s"] == rows["b"]["finished_at_s"] == pytest.approx(3.0, rel=1e-12)
    assert "tenants" not in result.summary["speculative"]


def test_kv_blocks_grow_at_a_shares_own_pace_and_are_conserved(run_mapping: Run) -> None:
    # 1-token blocks: the prompts hold 20; a takes a block every step, b at even steps only; at
    # step 4 a makes its last token (logged before it leaves), then b alone holds 10 + 2 and
    # gains nothing at step 5. The run's invariants check conservation at the end.
    raw = two_tenants(False)
    raw["kv"] = {"block_size_tokens": 1, "num_blocks": 40}
    steps = read_steps(run_mapping(raw))
    assert [s["kv_used_blocks"] for s in steps[:6]] == [20, 21, 23, 24, 26, 12]
    assert [s["num_emitted_tokens"] for s in steps[:6]] == [2, 1, 2, 1, 2, 0]


def test_beta_draws_are_reproducible_per_tenant_and_average_their_e() -> None:
    beta = {"kind": "beta", "mean": 0.7, "concentration": 8.0}
    config = Speculative.model_validate(
        {"kind": "eagle", "num_speculative_tokens": 3, "acceptance_rate": 0.5, "tenant_acceptance_rates": {"b": beta}}
    )

    def shares(tenants: list[str], seed: int) -> list[int]:
        draws = AcceptanceDraws(config, tenants, seed)
        out = []
        for i in range(4000):
            request = Request(i, "b", 0.0, 10, 10)
            draws.assign(request)
            out.append(request.decode_share)
        return out

    first = shares(["a", "b"], 1)
    assert first == shares(["a", "b"], 1)
    assert first == shares(["a", "b", "c"], 1)  # another tenant's stream reshuffles none of b's draws
    assert first != shares(["a", "b"], 2)
    mean_e = sum(first) / len(first) / FULL_SHARE * 4.0  # E_max = k + 1 with a distribution
    assert mean_e == pytest.approx(BetaAcceptance.model_validate(beta).tokens_per_step(3), rel=0.02)
    assert config.tokens_per_step("a") == expected_tokens_per_step(0.5, 3)


def test_a_narrow_beta_is_its_mean_rate() -> None:
    narrow = BetaAcceptance(kind="beta", mean=0.8, concentration=1e4)
    assert narrow.tokens_per_step(3) == pytest.approx(expected_tokens_per_step(0.8, 3), rel=1e-3)


@pytest.mark.parametrize(
    ("speculative", "message"),
    [
        ({"tenant_acceptance_rates": {"tt": 0.5}}, "speculative.tenant_acceptance_rates.tt: no such tenant (did you"),
        ({"acceptance_rate": {"kind": "beta", "mean": 1.0, "concentration": 2}}, "less than 1"),
        ({"acceptance_rate": {"kind": "beta", "mean": 0.5}}, "concentration"),
        ({"acceptance_rate": {"kind": "gamma", "mean": 0.5, "concentration": 2}}, "gamma"),
    ],
)
def test_config_errors(speculative: dict[str, Any], message: str) -> None:
    base = {"kind": "ngram", "num_speculative_tokens": 2, "acceptance_rate": 0.5}
    with pytest.raises(ConfigError) as caught:
        scenario_from_mapping(explicit_scenario([(0.0, 10, 5)], speculative={**base, **speculative}), "s.yaml")
    assert message in str(caught.value)


def test_a_share_gains_a_token_exactly_where_its_count_grows() -> None:
    # the rule the seats, the KV manager and the gaps apply inline on every step with lanes
    for share in (1, 7, 512, 700, 1023, FULL_SHARE):
        for index in range(-2, 3 * FULL_SHARE):
            assert gains_at(index, share) == (share_tokens(index, share) != share_tokens(index - 1, share))
