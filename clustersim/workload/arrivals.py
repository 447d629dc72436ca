"""Arrival streams: pure generators of ``(arrival_at_s, prompt_tokens, output_tokens)``.

Each tenant draws from its own random streams, keyed by the tenant's name and the purpose of the
draws, so adding or reordering tenants never changes another tenant's traffic. Draws are made
in chunks of :data:`DRAW_CHUNK` per numpy call, never one call per request.

Open-loop processes (``poisson``, ``gamma``, ``stages``, ``diurnal``) are arrival times in
chunks, zipped with length draws; ``trace`` replays a file read beforehand
(:mod:`clustersim.workload.traces`) and adds each request's session and prefix hash ids.
Closed-loop users are a SimPy process (:mod:`clustersim.workload.source`) fed by
:func:`closed_loop_draws`.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Iterator

import numpy as np
from numpy.typing import NDArray

from clustersim.config.workload import (
    ArrivalProcess,
    ClosedLoopArrivals,
    DiurnalArrivals,
    EmpiricalLengths,
    ExplicitArrivals,
    ExponentialTime,
    FixedTime,
    GammaArrivals,
    LengthDistribution,
    LognormalTime,
    PoissonArrivals,
    StagedArrivals,
    Tenant,
    ThinkTime,
    TraceArrivals,
)
from clustersim.registry import Registry
from clustersim.workload.lengths import sample_lengths, sequence_chunks
from clustersim.workload.traces import TenantData, TraceTable

ArrivalTuple = tuple[float, int, int]
TracedArrival = tuple[float, int, int, int, tuple[int, ...]]  # ... session_id, prefix_hash_ids
ThinkDraw = tuple[float, int, int]  # think time s, prompt_tokens, output_tokens

DRAW_CHUNK = 4096  # samples drawn per numpy call: per-chunk work, not per-request Python calls

STREAM_ARRIVALS = 0  # inter-arrival gaps, thinning draws, think times
STREAM_PROMPT = 1
STREAM_OUTPUT = 2


def tenant_rng(seed: int, tenant_name: str, stream: int) -> np.random.Generator:
    """The random stream ``stream`` of tenant ``tenant_name`` under scenario ``seed``."""
    key = zlib.crc32(tenant_name.encode("utf-8"))
    return np.random.default_rng(np.random.SeedSequence(entropy=seed, spawn_key=(key, stream)))


# ----------------------------------------------------------------------------- arrival times
def poisson_times(rate_per_s: float, rng: np.random.Generator) -> Iterator[NDArray[np.float64]]:
    """Chunks of arrival times of a Poisson process from time 0."""
    now_s = 0.0
    while True:
        times = now_s + np.cumsum(rng.exponential(1.0 / rate_per_s, size=DRAW_CHUNK))
        now_s = float(times[-1])
        yield times


def gamma_times(rate_per_s: float, cv: float, rng: np.random.Generator) -> Iterator[NDArray[np.float64]]:
    """Chunks of arrival times of a renewal process with gamma gaps (mean ``1/rate``, coefficient of variation ``cv``).

    Shape ``k = 1 / cv^2`` and scale ``1 / (rate k)`` give mean ``1/rate`` and variance ``cv^2 / rate^2``.
    """
    shape = 1.0 / (cv * cv)
    scale = 1.0 / (rate_per_s * shape)
    now_s = 0.0
    while True:
        times = now_s + np.cumsum(rng.gamma(shape, scale, size=DRAW_CHUNK))
        now_s = float(times[-1])
        yield times


def invert_stages(arrival: StagedArrivals, points: NDArray[np.float64]) -> NDArray[np.float64]:
    """Map increasing points of a unit-rate Poisson process to arrival times of the staged process.

    The cumulative rate ``Lambda(t)`` is piecewise linear, so its inverse is exact: a point ``e``
    in stage ``j`` maps to ``start_j + (e - Lambda(start_j)) / rate_j`` (plus whole periods when the
    stages repeat). Without ``repeat``, points beyond the last stage are dropped.
    """
    durations = np.array([s.duration_s for s in arrival.stages])
    rates = np.array([s.rate_per_s for s in arrival.stages])
    starts = np.concatenate(([0.0], np.cumsum(durations)[:-1]))
    cum_start = np.concatenate(([0.0], np.cumsum(rates * durations)[:-1]))
    cum_period = float((rates * durations).sum())
    rate_or_inf = np.where(rates > 0, rates, np.inf)  # a point can only round onto a silent stage's start
    cycle = np.floor(points / cum_period)
    if not arrival.repeat:
        points = points[cycle == 0]
        cycle = cycle[: points.size]
    within = points - cycle * cum_period
    stage = np.minimum(np.searchsorted(cum_start, within, side="right") - 1, len(rates) - 1)
    times: NDArray[np.float64] = (
        cycle * durations.sum() + starts[stage] + (within - cum_start[stage]) / rate_or_inf[stage]
    )
    return times


def staged_times(arrival: StagedArrivals, rng: np.random.Generator) -> Iterator[NDArray[np.float64]]:
    """Chunks of arrival times of a Poisson process with a piecewise-constant rate (see :func:`invert_stages`)."""
    done = 0.0
    while True:
        points = done + np.cumsum(rng.exponential(1.0, size=DRAW_CHUNK))
        done = float(points[-1])
        times = invert_stages(arrival, points)
        if times.size:
            yield times
        if times.size < DRAW_CHUNK:
            return


def diurnal_rate_per_s(arrival: DiurnalArrivals, time_s: NDArray[np.float64]) -> NDArray[np.float64]:
    """The rate of a diurnal process at ``time_s``."""
    peak_at_s = arrival.peak_at_s if arrival.peak_at_s is not None else arrival.period_s / 2
    swing = (1.0 + np.cos(2.0 * np.pi * (time_s - peak_at_s) / arrival.period_s)) / 2.0
    rate: NDArray[np.float64] = arrival.min_rate_per_s + (arrival.peak_rate_per_s - arrival.min_rate_per_s) * swing
    return rate


def diurnal_times(arrival: DiurnalArrivals, rng: np.random.Generator) -> Iterator[NDArray[np.float64]]:
    """Chunks of arrival times of a diurnal process, by thinning a Poisson process at the peak rate.

    Each chunk draws ``DRAW_CHUNK`` candidate gaps, then as many uniforms; a candidate at ``t`` is
    kept when its uniform is below ``rate(t) / peak``.
    """
    peak = arrival.peak_rate_per_s
    now_s = 0.0
    while True:
        candidates = now_s + np.cumsum(rng.exponential(1.0 / peak, size=DRAW_CHUNK))
        keep = rng.random(DRAW_CHUNK) * peak < diurnal_rate_per_s(arrival, candidates)
        now_s = float(candidates[-1])
        if keep.any():
            yield candidates[keep]


# ----------------------------------------------------------------------------- lengths and tenants
def length_chunks(
    dist: LengthDistribution, rng: np.random.Generator, observed: NDArray[np.int64] | None
) -> Iterator[NDArray[np.int64]]:
    """Endless chunks of ``DRAW_CHUNK`` lengths (``empirical`` lengths in ``sequence`` order: the
    lengths in their order, round and round, drawing nothing from ``rng``)."""
    if isinstance(dist, EmpiricalLengths) and dist.order == "sequence":
        yield from sequence_chunks(dist, observed, DRAW_CHUNK)
        return
    while True:
        yield sample_lengths(dist, rng, DRAW_CHUNK, observed)


TimesFactory = Callable[[ArrivalProcess, np.random.Generator], Iterator[NDArray[np.float64]]]


def _poisson(arrival: ArrivalProcess, rng: np.random.Generator) -> Iterator[NDArray[np.float64]]:
    assert isinstance(arrival, PoissonArrivals)
    return poisson_times(arrival.rate_per_s, rng)


def _gamma(arrival: ArrivalProcess, rng: np.random.Generator) -> Iterator[NDArray[np.float64]]:
    assert isinstance(arrival, GammaArrivals)
    return gamma_times(arrival.rate_per_s, arrival.cv, rng)


def _stages(arrival: ArrivalProcess, rng: np.random.Generator) -> Iterator[NDArray[np.float64]]:
    assert isinstance(arrival, StagedArrivals)
    return staged_times(arrival, rng)


def _diurnal(arrival: ArrivalProcess, rng: np.random.Generator) -> Iterator[NDArray[np.float64]]:
    assert isinstance(arrival, DiurnalArrivals)
    return diurnal_times(arrival, rng)


OPEN_LOOP_TIMES: Registry[TimesFactory] = Registry(
    "open-loop arrival process",
    [("poisson", _poisson), ("gamma", _gamma), ("stages", _stages), ("diurnal", _diurnal)],
)


def _times(tenant: Tenant, seed: int) -> Iterator[NDArray[np.float64]]:
    rng = tenant_rng(seed, tenant.name, STREAM_ARRIVALS)
    return OPEN_LOOP_TIMES.get(tenant.arrival.kind)(tenant.arrival, rng)


def _synthetic(tenant: Tenant, seed: int, data: TenantData) -> Iterator[ArrivalTuple]:
    """Open-loop arrival times zipped with length draws (lengths drawn in the same chunk sizes)."""
    assert tenant.prompt_tokens is not None and tenant.output_tokens is not None
    prompt_chunks = length_chunks(
        tenant.prompt_tokens, tenant_rng(seed, tenant.name, STREAM_PROMPT), data.observed_prompt_tokens
    )
    output_chunks = length_chunks(
        tenant.output_tokens, tenant_rng(seed, tenant.name, STREAM_OUTPUT), data.observed_output_tokens
    )
    prompts: list[int] = []
    outputs: list[int] = []
    for times in _times(tenant, seed):
        while len(prompts) < times.size:  # thinning and stage ends yield short chunks
            prompts += next(prompt_chunks).tolist()
            outputs += next(output_chunks).tolist()
        n = times.size
        yield from zip(times.tolist(), prompts[:n], outputs[:n], strict=True)
        del prompts[:n], outputs[:n]


def replay(arrival: TraceArrivals, table: TraceTable) -> Iterator[TracedArrival]:
    """A trace's requests with scaled times and capped lengths, in chunks of ``DRAW_CHUNK`` rows."""
    times = table.arrival_at_s * arrival.time_scale
    prompts = table.prompt_tokens
    outputs = table.output_tokens
    if arrival.max_prompt_tokens is not None:
        prompts = np.minimum(prompts, arrival.max_prompt_tokens)
    if arrival.max_output_tokens is not None:
        outputs = np.minimum(outputs, arrival.max_output_tokens)
    for start in range(0, table.num_requests, DRAW_CHUNK):
        end = start + DRAW_CHUNK
        n = min(end, table.num_requests) - start
        sessions = table.session_id[start:end].tolist() if table.session_id is not None else [-1] * n
        hashes = table.prefix_hash_ids[start:end] if table.prefix_hash_ids is not None else ((),) * n
        yield from zip(
            times[start:end].tolist(),
            prompts[start:end].tolist(),
            outputs[start:end].tolist(),
            sessions,
            hashes,
            strict=True,
        )


StreamFactory = Callable[[Tenant, int, TenantData], "Iterator[ArrivalTuple] | Iterator[TracedArrival]"]


def _explicit(tenant: Tenant, seed: int, data: TenantData) -> Iterator[ArrivalTuple]:
    assert isinstance(tenant.arrival, ExplicitArrivals)
    return iter([(r.arrival_at_s, r.prompt_tokens, r.output_tokens) for r in tenant.arrival.requests])


def _replayed(tenant: Tenant, seed: int, data: TenantData) -> Iterator[TracedArrival]:
    assert isinstance(tenant.arrival, TraceArrivals)
    if data.trace is None:
        raise ValueError(f"tenant '{tenant.name}' replays a trace that was not read")
    return replay(tenant.arrival, data.trace)


STREAMS: Registry[StreamFactory] = Registry(
    "open-loop arrival stream",
    [
        *((kind, _synthetic) for kind in OPEN_LOOP_TIMES.names()),
        ("explicit", _explicit),
        ("trace", _replayed),
    ],
)


def tenant_arrivals(
    tenant: Tenant, seed: int, data: TenantData | None = None
) -> Iterator[ArrivalTuple] | Iterator[TracedArrival]:
    """All requests of one open-loop tenant in arrival order (infinite for open-ended processes).

    ``data``: what the tenant read from disk (required for ``trace`` arrivals and for
    ``empirical`` lengths drawn from a trace). Closed-loop users are a SimPy process
    (:mod:`clustersim.workload.source`), not a stream.
    """
    return STREAMS.get(tenant.arrival.kind)(tenant, seed, data if data is not None else TenantData())


# ----------------------------------------------------------------------------- closed loop
ThinkSampler = Callable[[ThinkTime, np.random.Generator], NDArray[np.float64]]


def _fixed_think(think: ThinkTime, rng: np.random.Generator) -> NDArray[np.float64]:
    assert isinstance(think, FixedTime)
    return np.full(DRAW_CHUNK, think.time_s)


def _exponential_think(think: ThinkTime, rng: np.random.Generator) -> NDArray[np.float64]:
    assert isinstance(think, ExponentialTime)
    return rng.exponential(think.mean_s, size=DRAW_CHUNK)


def _lognormal_think(think: ThinkTime, rng: np.random.Generator) -> NDArray[np.float64]:
    assert isinstance(think, LognormalTime)
    return rng.lognormal(math.log(think.median_s), think.sigma, size=DRAW_CHUNK)


THINK_TIMES: Registry[ThinkSampler] = Registry(
    "think time", [("fixed", _fixed_think), ("exponential", _exponential_think), ("lognormal", _lognormal_think)]
)


def think_times(think: ThinkTime, rng: np.random.Generator) -> Iterator[NDArray[np.float64]]:
    """Endless chunks of think times (seconds)."""
    sample = THINK_TIMES.get(think.kind)
    while True:
        yield sample(think, rng)


def closed_loop_draws(tenant: Tenant, seed: int, data: TenantData | None = None) -> Iterator[ThinkDraw]:
    """A closed-loop tenant's random draws, in the order its users consume them.

    Each item is the think time before a request (ignored for a user's first request, which is
    sent at its ramp-up time) and the request's lengths. The draws are independent of the
    simulation; which user takes which draw depends on when requests end.
    """
    arrival = tenant.arrival
    assert isinstance(arrival, ClosedLoopArrivals)
    assert tenant.prompt_tokens is not None and tenant.output_tokens is not None
    data = data if data is not None else TenantData()
    thinks = think_times(arrival.think_time, tenant_rng(seed, tenant.name, STREAM_ARRIVALS))
    prompts = length_chunks(
        tenant.prompt_tokens, tenant_rng(seed, tenant.name, STREAM_PROMPT), data.observed_prompt_tokens
    )
    outputs = length_chunks(
        tenant.output_tokens, tenant_rng(seed, tenant.name, STREAM_OUTPUT), data.observed_output_tokens
    )
    for think, prompt, output in zip(thinks, prompts, outputs, strict=True):
        yield from zip(think.tolist(), prompt.tolist(), output.tolist(), strict=True)
