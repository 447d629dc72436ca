"""One benchmark as a tool's file describes it: the shared shape the format readers produce.

A :class:`BenchmarkRun` has everything of a :class:`~clustersim.calibration.measurements.Measurement`
that the file says (load, lengths, measured values, the requests themselves where listed) and the
model id the tool recorded; the GPU, parallelism and precision come from the command's options
(:mod:`.datafiles`). Times are converted to seconds here, once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from clustersim.calibration.jsonfields import JsonObject
from clustersim.calibration.measurements import MAX_INTEGER, METRICS, LoadKind, Metric, ReplayedRequest
from clustersim.errors import ConfigError, shown_value

MS = 1e-3  # seconds per millisecond: the tools write latencies in ms

# (metric, the object holding the value or None, its key, the factor to the metric's unit)
MeasuredSource = tuple[Metric, JsonObject | None, str, float]


@dataclass(frozen=True)
class BenchmarkRun:
    """One benchmark of a file (``index``: its 1-based position there), before the options complete it."""

    index: int
    model_id: str | None
    load_kind: LoadKind
    load: float
    prompt_tokens: int
    output_tokens: int
    measured: dict[Metric, float] = field(default_factory=dict)
    requests: tuple[ReplayedRequest, ...] | None = None
    num_requests: int | None = None
    interarrival_cv: float = 1.0


def measured_values(sources: Iterable[MeasuredSource], where: JsonObject) -> dict[Metric, float]:
    """The measured values the file gives, in the metrics' units.

    Absent, null and zero values (a tool writes 0 where there was nothing to measure, such as the
    ITL of one-token outputs) are left out; a negative value is refused. ``where`` names the
    benchmark in the error when no mean (what a fit minimises) is measured.
    """
    measured: dict[Metric, float] = {}
    for metric, holder, key, factor in sources:
        if holder is None or not holder.has(key):
            continue
        value = holder.number(key)
        if value < 0:
            raise holder.error(key, f"{shown_value(value)} must be at least 0")
        if value > 0:
            measured.setdefault(metric, value * factor)
    if not any(metric in METRICS for metric in measured):  # a p99 alone is scored, but gives the fit nothing
        raise ConfigError(where.source, where.path, "nothing measured: no mean TTFT, ITL or output throughput in it")
    return measured


def mean_tokens(total: float, count: int) -> int:
    """A mean length in whole tokens (at least 1): the fixed length of a summary-only row."""
    return min(MAX_INTEGER, max(1, round(total / count)))


def replayed(
    prompts: Sequence[int], outputs: Sequence[int], starts_s: Sequence[float] | None
) -> tuple[ReplayedRequest, ...]:
    """The requests of a benchmark, with arrival times from the first request's start (or None),
    to the microsecond."""
    if starts_s is None:
        return tuple((None, p, o) for p, o in zip(prompts, outputs, strict=True))
    first = min(starts_s)
    return tuple((round(s - first, 6), p, o) for s, p, o in zip(starts_s, prompts, outputs, strict=True))


def mean_lengths(requests: Sequence[ReplayedRequest]) -> tuple[int, int]:
    """Mean prompt and output lengths of the requests, in whole tokens."""
    count = len(requests)
    return mean_tokens(sum(r[1] for r in requests), count), mean_tokens(sum(r[2] for r in requests), count)


def token_length(value: float, where: JsonObject, key: str) -> int:
    """A request's length in tokens: a whole number (0 allowed: such requests are not replayed)."""
    if value < 0 or value != int(value) or value > MAX_INTEGER:
        raise where.error(key, f"expected token counts (whole numbers of at least 0), got {shown_value(value)}")
    return int(value)
