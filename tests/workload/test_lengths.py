"""Exponential and empirical length distributions."""

from __future__ import annotations

import numpy as np
import pytest

from clustersim.config.workload import EmpiricalLengths, ExponentialLengths
from clustersim.workload.arrivals import DRAW_CHUNK, length_chunks
from clustersim.workload.lengths import sample_lengths


def test_exponential_lengths_are_ceilings_of_exponentials():
    rng = np.random.default_rng(5)
    dist = ExponentialLengths(kind="exponential", mean_tokens=20)
    values = sample_lengths(dist, rng, 200_000)
    assert values.min() >= 1
    # ceil(Exp(mean m)) is geometric on 1, 2, ... with p = 1 - exp(-1/m)
    assert values.mean() == pytest.approx(1 / (1 - np.exp(-1 / 20)), rel=0.01)
    again = np.ceil(np.random.default_rng(5).exponential(20, size=200_000)).astype(np.int64)
    assert values.tolist() == again.tolist()


def test_exponential_lengths_clip_at_max():
    values = sample_lengths(
        ExponentialLengths(kind="exponential", mean_tokens=0.01, max_tokens=3), np.random.default_rng(0), 1000
    )
    assert set(values.tolist()) == {1}
    values = sample_lengths(
        ExponentialLengths(kind="exponential", mean_tokens=1000, max_tokens=3), np.random.default_rng(0), 1000
    )
    assert values.max() == 3


def test_empirical_values_are_resampled_uniformly():
    dist = EmpiricalLengths(kind="empirical", values=(5, 50, 500))
    values = sample_lengths(dist, np.random.default_rng(1), 30_000)
    assert set(values.tolist()) == {5, 50, 500}
    assert np.bincount(np.searchsorted([5, 50, 500], values)) == pytest.approx([10_000] * 3, rel=0.05)


def test_empirical_observed_lengths_override_and_clip():
    dist = EmpiricalLengths(
        kind="empirical", trace={"path": "x.csv", "format": "azure"}, lengths_of="output", max_tokens=100
    )
    values = sample_lengths(dist, np.random.default_rng(1), 1000, observed=np.array([7, 700], dtype=np.int64))
    assert set(values.tolist()) == {7, 100}


def test_empirical_lengths_in_sequence_are_taken_in_order_round_and_round_across_chunks():
    dist = EmpiricalLengths(kind="empirical", values=(5, 50, 500), order="sequence", max_tokens=100)
    chunks = length_chunks(dist, np.random.default_rng(1), None)
    first, second = next(chunks), next(chunks)
    assert first.size == DRAW_CHUNK and first[:4].tolist() == [5, 50, 100, 5]
    both = np.concatenate([first, second])
    assert both.tolist() == [(5, 50, 100)[i % 3] for i in range(2 * DRAW_CHUNK)]  # no jump at the chunk edge
    observed = length_chunks(
        EmpiricalLengths(kind="empirical", trace={"path": "x.csv", "format": "azure"}, order="sequence"),
        np.random.default_rng(1),
        np.array([9, 8, 7], dtype=np.int64),
    )
    assert next(observed)[:5].tolist() == [9, 8, 7, 9, 8]
