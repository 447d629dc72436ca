"""Token-length distributions (pure: a config and a numpy Generator in, integer lengths out)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
from numpy.typing import NDArray

from clustersim.config.workload import (
    EmpiricalLengths,
    ExponentialLengths,
    FixedLengths,
    LengthDistribution,
    LognormalLengths,
    UniformLengths,
)
from clustersim.registry import Registry

_NO_CAP = int(np.iinfo(np.int32).max)
Observed = NDArray[np.int64] | None


Sampler = Callable[[LengthDistribution, np.random.Generator, int, NDArray[np.int64] | None], NDArray[np.int64]]


def _fixed(dist: LengthDistribution, rng: np.random.Generator, num: int, observed: Observed) -> NDArray[np.int64]:
    assert isinstance(dist, FixedLengths)
    return np.full(num, dist.tokens, dtype=np.int64)


def _uniform(dist: LengthDistribution, rng: np.random.Generator, num: int, observed: Observed) -> NDArray[np.int64]:
    assert isinstance(dist, UniformLengths)
    return rng.integers(dist.min_tokens, dist.max_tokens + 1, size=num, dtype=np.int64)


def _lognormal(dist: LengthDistribution, rng: np.random.Generator, num: int, observed: Observed) -> NDArray[np.int64]:
    assert isinstance(dist, LognormalLengths)
    raw = rng.lognormal(mean=np.log(dist.median_tokens), sigma=dist.sigma, size=num)
    upper = dist.max_tokens if dist.max_tokens is not None else _NO_CAP
    return np.clip(np.rint(raw), dist.min_tokens, upper).astype(np.int64)


def _exponential(dist: LengthDistribution, rng: np.random.Generator, num: int, observed: Observed) -> NDArray[np.int64]:
    assert isinstance(dist, ExponentialLengths)
    raw = np.ceil(rng.exponential(dist.mean_tokens, size=num))
    upper = dist.max_tokens if dist.max_tokens is not None else _NO_CAP
    return np.clip(raw, 1, upper).astype(np.int64)


def _pool(dist: EmpiricalLengths, observed: Observed) -> NDArray[np.int64]:
    """The lengths an ``empirical`` distribution takes from: a trace's, else its inline ``values``."""
    pool = observed if observed is not None else np.asarray(dist.values, dtype=np.int64)
    if pool.size == 0:
        raise ValueError("an empirical length distribution needs at least one observed length")
    return pool


def _empirical(dist: LengthDistribution, rng: np.random.Generator, num: int, observed: Observed) -> NDArray[np.int64]:
    assert isinstance(dist, EmpiricalLengths)
    pool = _pool(dist, observed)
    values = pool[rng.integers(0, pool.size, size=num)]
    return np.minimum(values, dist.max_tokens) if dist.max_tokens is not None else values


def sequence_chunks(dist: EmpiricalLengths, observed: Observed, num: int) -> Iterator[NDArray[np.int64]]:
    """Endless chunks of ``num`` lengths taken in their order, round and round (``order: sequence``)."""
    pool = _pool(dist, observed)
    if dist.max_tokens is not None:
        pool = np.minimum(pool, dist.max_tokens)
    start = 0
    while True:
        yield pool[(start + np.arange(num)) % pool.size]
        start = (start + num) % pool.size


LENGTHS: Registry[Sampler] = Registry(
    "length distribution",
    [
        ("fixed", _fixed),
        ("uniform", _uniform),
        ("lognormal", _lognormal),
        ("exponential", _exponential),
        ("empirical", _empirical),
    ],
)


def sample_lengths(
    dist: LengthDistribution, rng: np.random.Generator, num: int, observed: NDArray[np.int64] | None = None
) -> NDArray[np.int64]:
    """Draw ``num`` token lengths (each >= 1) from ``dist``.

    ``observed``: the lengths an ``empirical`` distribution resamples when they come from a trace
    (read beforehand by :mod:`clustersim.workload.traces`); inline ``values`` are used otherwise.
    """
    return LENGTHS.get(dist.kind)(dist, rng, num, observed)
