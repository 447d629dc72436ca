"""Token-length distributions (pure: a config and a numpy Generator in, integer lengths out)."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from clustersim.config.scenario import FixedLengths, LengthDistribution, LognormalLengths, UniformLengths


def sample_lengths(dist: LengthDistribution, rng: np.random.Generator, num: int) -> NDArray[np.int64]:
    """Draw ``num`` token lengths (each >= 1) from ``dist``."""
    if isinstance(dist, FixedLengths):
        return np.full(num, dist.tokens, dtype=np.int64)
    if isinstance(dist, UniformLengths):
        return rng.integers(dist.min_tokens, dist.max_tokens + 1, size=num, dtype=np.int64)
    if isinstance(dist, LognormalLengths):
        raw = rng.lognormal(mean=np.log(dist.median_tokens), sigma=dist.sigma, size=num)
        upper = dist.max_tokens if dist.max_tokens is not None else np.iinfo(np.int32).max
        return np.clip(np.rint(raw), dist.min_tokens, upper).astype(np.int64)
    raise TypeError(f"unknown length distribution {dist!r}")
