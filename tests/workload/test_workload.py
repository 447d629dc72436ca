"""Length distributions and arrival streams: pure, seeded, independent per tenant."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from clustersim.config.workload import FixedLengths, LognormalLengths, PoissonArrivals, Tenant, UniformLengths
from clustersim.workload.arrivals import tenant_arrivals
from clustersim.workload.lengths import sample_lengths


def test_fixed_and_uniform_lengths():
    rng = np.random.default_rng(0)
    assert sample_lengths(FixedLengths(kind="fixed", tokens=7), rng, 5).tolist() == [7] * 5
    values = sample_lengths(UniformLengths(kind="uniform", min_tokens=3, max_tokens=5), rng, 10_000)
    assert set(values.tolist()) == {3, 4, 5}


def test_lognormal_median_and_clipping():
    rng = np.random.default_rng(0)
    dist = LognormalLengths(kind="lognormal", median_tokens=1000, sigma=0.5, min_tokens=10, max_tokens=3000)
    values = sample_lengths(dist, rng, 100_000)
    assert np.median(values) == pytest.approx(1000, rel=0.02)
    assert values.min() >= 10 and values.max() <= 3000


def make_tenant(name: str, rate: float) -> Tenant:
    return Tenant(
        name=name,
        arrival=PoissonArrivals(kind="poisson", rate_per_s=rate),
        prompt_tokens=FixedLengths(kind="fixed", tokens=10),
        output_tokens=UniformLengths(kind="uniform", min_tokens=1, max_tokens=100),
    )


def test_poisson_rate_and_exponential_gaps():
    arrivals = list(itertools.islice(tenant_arrivals(make_tenant("a", 5.0), seed=1), 20_000))
    times = np.array([a[0] for a in arrivals])
    gaps = np.diff(times)
    assert np.all(gaps >= 0)
    assert 1 / gaps.mean() == pytest.approx(5.0, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)  # exponential: CV = 1


def test_streams_depend_on_seed_and_tenant_name_only():
    first = list(itertools.islice(tenant_arrivals(make_tenant("a", 5.0), seed=1), 100))
    again = list(itertools.islice(tenant_arrivals(make_tenant("a", 5.0), seed=1), 100))
    other_name = list(itertools.islice(tenant_arrivals(make_tenant("b", 5.0), seed=1), 100))
    other_seed = list(itertools.islice(tenant_arrivals(make_tenant("a", 5.0), seed=2), 100))
    assert first == again
    assert first != other_name and first != other_seed
