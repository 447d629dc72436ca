"""Arrival processes: exact hand-computed times where the process is deterministic, moments where it is random."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from conftest import read_requests

from clustersim.config.workload import (
    DiurnalArrivals,
    ExponentialLengths,
    FixedLengths,
    GammaArrivals,
    PoissonArrivals,
    RateStage,
    StagedArrivals,
    Tenant,
)
from clustersim.workload.arrivals import (
    diurnal_rate_per_s,
    invert_stages,
    poisson_times,
    tenant_arrivals,
    tenant_rng,
)

FIXED = FixedLengths(kind="fixed", tokens=10)


def tenant(arrival, name: str = "a") -> Tenant:
    return Tenant(name=name, arrival=arrival, prompt_tokens=FIXED, output_tokens=FIXED)


def first(n: int, t: Tenant, seed: int = 1) -> list:
    return list(itertools.islice(tenant_arrivals(t, seed), n))


def stages(*pairs: tuple[float, float], repeat: bool = False) -> StagedArrivals:
    return StagedArrivals(
        kind="stages", stages=tuple(RateStage(duration_s=d, rate_per_s=r) for d, r in pairs), repeat=repeat
    )


# ----------------------------------------------------------------------------- poisson
def test_poisson_stream_is_unchanged_by_the_refactor():
    """The times are exactly the cumulative sum of one exponential draw per request from the tenant's stream."""
    gaps = tenant_rng(1, "a", 0).exponential(1 / 5.0, size=4096)
    times = [a[0] for a in first(5, tenant(PoissonArrivals(kind="poisson", rate_per_s=5.0)))]
    assert times == np.cumsum(gaps)[:5].tolist()
    assert next(poisson_times(5.0, tenant_rng(1, "a", 0)))[:5].tolist() == times


# ----------------------------------------------------------------------------- gamma
@pytest.mark.parametrize("cv", [0.5, 1.0, 3.0])
def test_gamma_gaps_have_the_rate_and_cv(cv):
    arrivals = first(40_000, tenant(GammaArrivals(kind="gamma", rate_per_s=4.0, cv=cv)))
    gaps = np.diff([0.0] + [a[0] for a in arrivals])
    assert gaps.mean() == pytest.approx(0.25, rel=0.04)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.05)


def test_gamma_with_cv_1_is_exponential_in_distribution():
    arrivals = first(40_000, tenant(GammaArrivals(kind="gamma", rate_per_s=2.0, cv=1.0)))
    gaps = np.diff([0.0] + [a[0] for a in arrivals])
    # P(gap > mean) = exp(-1) for an exponential
    assert np.mean(gaps > 0.5) == pytest.approx(np.exp(-1), abs=0.01)


# ----------------------------------------------------------------------------- stages
@pytest.mark.parametrize(
    ("points", "expected"),
    [
        # stage 0: 10 s at 1/s (Lambda 0..10); stage 1: 10 s silent; stage 2: 10 s at 2/s (Lambda 10..30)
        ([0.5, 9.5, 10.5, 29.0], [0.5, 9.5, 20.25, 29.5]),
        ([30.5], []),  # beyond the last stage: dropped
    ],
)
def test_stage_inversion_by_hand(points, expected):
    arrival = stages((10, 1.0), (10, 0.0), (10, 2.0))
    assert invert_stages(arrival, np.array(points)).tolist() == pytest.approx(expected)


def test_repeated_stages_add_whole_periods():
    arrival = stages((10, 1.0), (10, 0.0), (10, 2.0), repeat=True)
    # Lambda over one 30 s period is 30: point 31 is point 1 of the second period -> 30 + 1
    assert invert_stages(arrival, np.array([31.0, 45.5])).tolist() == pytest.approx([31.0, 30 + 20 + 2.75])


def test_finite_stages_end_and_rates_hold():
    arrival = stages((100, 50.0), (100, 0.0), (100, 10.0))
    times = np.array([a[0] for a in tenant_arrivals(tenant(arrival), seed=3)])
    assert times.max() < 300
    assert not np.any((times > 100) & (times < 200))  # the silent stage
    assert np.sum(times < 100) == pytest.approx(5000, rel=0.05)
    assert np.sum(times > 200) == pytest.approx(1000, rel=0.1)
    assert np.all(np.diff(times) >= 0)


# ----------------------------------------------------------------------------- diurnal
def test_diurnal_rate_by_hand():
    arrival = DiurnalArrivals(kind="diurnal", min_rate_per_s=2, peak_rate_per_s=10, period_s=100)
    rate = diurnal_rate_per_s(arrival, np.array([0.0, 25.0, 50.0, 75.0, 100.0]))
    assert rate.tolist() == pytest.approx([2.0, 6.0, 10.0, 6.0, 2.0])  # peak at half a period by default


def test_diurnal_thinning_follows_the_rate():
    arrival = DiurnalArrivals(kind="diurnal", min_rate_per_s=10, peak_rate_per_s=100, period_s=1000, peak_at_s=0)
    times = np.array([a[0] for a in first(200_000, tenant(arrival))])
    assert np.all(np.diff(times) > 0)
    # expected count in [0, 1000) = integral of the rate = mean rate x period = 55 x 1000
    one_period = times[times < 1000]
    assert one_period.size == pytest.approx(55_000, rel=0.02)
    # the busiest tenth of the period is around the peak, the quietest around the trough
    counts, _ = np.histogram(one_period, bins=10, range=(0, 1000))
    assert counts[0] > 4 * counts[5]


# ----------------------------------------------------------------------------- lengths and streams
def test_each_tenant_and_purpose_has_its_own_stream():
    """Changing one tenant's lengths does not move its arrival times; other tenants are untouched."""
    base = tenant(GammaArrivals(kind="gamma", rate_per_s=3, cv=2))
    other_lengths = base.model_copy(update={"output_tokens": ExponentialLengths(kind="exponential", mean_tokens=50)})
    assert [a[0] for a in first(100, base)] == [a[0] for a in first(100, other_lengths)]
    assert [a[0] for a in first(100, base)] != [a[0] for a in first(100, tenant(base.arrival, name="b"))]


def test_adding_a_tenant_does_not_change_another_tenants_arrivals(run_mapping):
    """End to end: tenant a's requests are identical with and without tenant b."""
    a = {
        "name": "a",
        "arrival": {"kind": "gamma", "rate_per_s": 2.0, "cv": 2.0},
        "prompt_tokens": {"kind": "uniform", "min_tokens": 10, "max_tokens": 100},
        "output_tokens": {"kind": "exponential", "mean_tokens": 5},
    }
    b = {
        "name": "b",
        "arrival": {"kind": "stages", "stages": [{"duration_s": 5, "rate_per_s": 4}]},
        "prompt_tokens": {"kind": "empirical", "values": [20, 40]},
        "output_tokens": {"kind": "fixed", "tokens": 3},
    }
    base = {
        "name": "t",
        "cluster": {"hardware": "H100-SXM", "model": "Llama-3.1-8B", "num_replicas": 2},
        "kv": {"num_blocks": 2000},
        "cost": {"kind": "unit", "step_time_s": 0.01},
        "stop": {"horizon_s": 20},
    }

    def tenant_a_rows(tenants):
        rows = read_requests(run_mapping({**base, "workload": {"tenants": tenants}}))
        return [(r["arrival_at_s"], r["prompt_tokens"], r["output_tokens"]) for r in rows if r["tenant"] == "a"]

    alone, together = tenant_a_rows([a]), tenant_a_rows([b, a])
    assert len(alone) > 20 and alone == together
