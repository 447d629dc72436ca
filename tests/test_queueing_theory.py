"""Analytical cross-checks: a one-seat replica with unit-cost steps is an M/G/1 queue.

A request with ``m`` output tokens occupies the single seat for exactly ``m`` steps, so with
Poisson arrivals its waiting time (arrival to first scheduled) must match the
Pollaczek-Khinchine formula ``Wq = lambda E[S^2] / (2 (1 - rho))`` within the simulation's own
confidence interval (batch means over the post-warm-up requests).
"""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

NUM_REQUESTS = 20_000
WARMUP_FRAC = 0.1
NUM_BATCHES = 20


def one_seat_queue(rate_per_s: float, output_tokens: dict, seed: int) -> dict:
    return {
        "name": "mg1",
        "seed": seed,
        "workload": {
            "tenants": [
                {
                    "name": "q",
                    "arrival": {"kind": "poisson", "rate_per_s": rate_per_s},
                    "prompt_tokens": {"kind": "fixed", "tokens": 16},
                    "output_tokens": output_tokens,
                }
            ]
        },
        "cluster": {"hardware": "H100-SXM", "model": "Llama-3.1-8B"},
        "scheduler": {"max_num_seqs": 1},
        "cost": {"kind": "unit", "step_time_s": 1.0},
        "stop": {"max_requests": NUM_REQUESTS},
    }


def mean_wait_with_ci(run) -> tuple[float, float]:
    table = pq.read_table(run.out_dir / "requests.parquet").sort_by("request_id")
    waits = (
        np.asarray(table.column("first_scheduled_at_s").to_numpy())
        - np.asarray(table.column("arrival_at_s").to_numpy())
    )[int(WARMUP_FRAC * NUM_REQUESTS) :]
    batches = np.array_split(waits, NUM_BATCHES)
    means = np.array([b.mean() for b in batches])
    return float(waits.mean()), float(means.std(ddof=1) / np.sqrt(NUM_BATCHES))


@pytest.mark.parametrize(
    ("name", "output_tokens", "mean_s", "second_moment_s2"),
    [
        ("M/D/1", {"kind": "fixed", "tokens": 10}, 10.0, 100.0),
        # uniform on 1..19: mean 10, variance (19^2 - 1) / 12 = 30
        ("M/G/1 uniform", {"kind": "uniform", "min_tokens": 1, "max_tokens": 19}, 10.0, 130.0),
        # exponential lengths under unit cost: ceil(Exp(mean 10)) is geometric with p = 1 - exp(-1/10):
        # E[S] = 1/p = 10.508332, E[S^2] = (2 - p)/p^2 = 210.341749: the discrete M/M/1
        ("M/M/1 (geometric)", {"kind": "exponential", "mean_tokens": 10.0}, 10.508331944775044, 210.34174857838426),
    ],
)
@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_waiting_time_matches_pollaczek_khinchine(run_mapping, name, output_tokens, mean_s, second_moment_s2, rho):
    rate = rho / mean_s
    expected = rate * second_moment_s2 / (2 * (1 - rho))
    simulated, half_width = mean_wait_with_ci(run_mapping(one_seat_queue(rate, output_tokens, seed=11)))
    assert abs(simulated - expected) < 4 * half_width, (name, rho, simulated, expected, half_width)
    assert half_width < 0.15 * expected  # the check has teeth: the interval is tight
