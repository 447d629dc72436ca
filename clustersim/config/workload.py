"""The traffic a scenario sends: trace files, length distributions, arrival processes, tenants.

Every model forbids unknown keys; closed choices are ``Literal``s; plug-in configs are
discriminated on ``kind`` (the registries of :mod:`clustersim.workload` are keyed the same way).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    model_validator,
)

from clustersim.config.base import SLO, StrictModel

# ----------------------------------------------------------------------------- trace files
TraceFormat = Literal["azure", "mooncake", "csv", "parquet"]


class TraceColumns(StrictModel):
    """Column names of a plain ``csv`` or ``parquet`` trace (arrival times in seconds from 0).

    The defaults are ``requests.parquet``'s names, so a run's log can be replayed as is.
    ``session_id`` (optional, integers): requests with the same value belong to one session.
    """

    arrival_at_s: str = "arrival_at_s"
    prompt_tokens: str = "prompt_tokens"
    output_tokens: str = "output_tokens"
    session_id: str | None = None


def _check_trace_columns(trace_format: TraceFormat, columns: TraceColumns | None) -> None:
    if columns is not None and trace_format not in ("csv", "parquet"):
        raise ValueError(f"columns applies to the csv and parquet formats only, not {trace_format}")


class TraceFile(StrictModel):
    """A request log on disk; ``path`` is relative to the scenario file's folder.

    Formats: ``azure`` (Azure LLM inference CSV: ``TIMESTAMP`` wall clock, ``ContextTokens``,
    ``GeneratedTokens``), ``mooncake`` (JSON lines: ``timestamp`` in ms, ``input_length``,
    ``output_length``, optional ``hash_ids``), ``csv`` and ``parquet`` (columns named by ``columns``).
    The file is read when the run starts, never while loading the scenario.
    """

    path: str = Field(min_length=1)
    format: TraceFormat
    columns: TraceColumns | None = None

    @model_validator(mode="after")
    def _columns_for_plain_formats(self) -> TraceFile:
        _check_trace_columns(self.format, self.columns)
        return self


# ----------------------------------------------------------------------------- lengths
class FixedLengths(StrictModel):
    """Every request has exactly ``tokens`` tokens."""

    kind: Literal["fixed"]
    tokens: PositiveInt


class UniformLengths(StrictModel):
    """Integer lengths uniform on ``[min_tokens, max_tokens]`` (both inclusive)."""

    kind: Literal["uniform"]
    min_tokens: PositiveInt
    max_tokens: PositiveInt

    @model_validator(mode="after")
    def _ordered(self) -> UniformLengths:
        if self.max_tokens < self.min_tokens:
            raise ValueError(f"max_tokens ({self.max_tokens}) must be >= min_tokens ({self.min_tokens})")
        return self


class LognormalLengths(StrictModel):
    """Lognormal lengths with the given median and log-space sigma, rounded and clipped to [min, max]."""

    kind: Literal["lognormal"]
    median_tokens: PositiveFloat
    sigma: NonNegativeFloat
    min_tokens: PositiveInt = 1
    max_tokens: PositiveInt | None = None

    @model_validator(mode="after")
    def _ordered(self) -> LognormalLengths:
        if self.max_tokens is not None and self.max_tokens < self.min_tokens:
            raise ValueError(f"max_tokens ({self.max_tokens}) must be >= min_tokens ({self.min_tokens})")
        return self


class ExponentialLengths(StrictModel):
    """``ceil(X)`` with ``X`` exponential of mean ``mean_tokens``: geometric on 1, 2, ... (memoryless).

    The mean is ``1 / (1 - exp(-1 / mean_tokens))``, about ``mean_tokens + 0.5``; ``max_tokens`` clips.
    """

    kind: Literal["exponential"]
    mean_tokens: PositiveFloat
    max_tokens: PositiveInt | None = None


class EmpiricalLengths(StrictModel):
    """Lengths drawn uniformly, with replacement, from observed ones: ``values`` or one column of a trace.

    ``trace``: the prompt lengths are used for ``prompt_tokens`` and the output lengths for
    ``output_tokens``, unless ``lengths_of`` says otherwise. ``max_tokens`` clips. ``order: sequence``
    takes them in their order instead, round and round: what a benchmark client that sends a fixed list
    of prompts one after another does (request ``k`` of the tenant gets length ``k`` of the list).
    """

    kind: Literal["empirical"]
    values: tuple[PositiveInt, ...] | None = Field(default=None, min_length=1)
    trace: TraceFile | None = None
    lengths_of: Literal["prompt", "output"] | None = None
    max_tokens: PositiveInt | None = None
    order: Literal["random", "sequence"] = "random"

    @model_validator(mode="after")
    def _one_source(self) -> EmpiricalLengths:
        if (self.values is None) == (self.trace is None):
            raise ValueError("give exactly one of values (a list of lengths) or trace (a trace file)")
        if self.lengths_of is not None and self.trace is None:
            raise ValueError("lengths_of applies to trace only")
        return self


LengthDistribution = Annotated[
    FixedLengths | UniformLengths | LognormalLengths | ExponentialLengths | EmpiricalLengths,
    Field(discriminator="kind"),
]


# ----------------------------------------------------------------------------- arrivals
class PoissonArrivals(StrictModel):
    """Exponential inter-arrival times at ``rate_per_s`` requests per second."""

    kind: Literal["poisson"]
    rate_per_s: PositiveFloat

    @property
    def is_finite(self) -> bool:
        return False


class GammaArrivals(StrictModel):
    """Gamma inter-arrival times of mean ``1 / rate_per_s`` and coefficient of variation ``cv``.

    ``cv`` 1 is Poisson; above 1 arrivals come in bursts; below 1 they are more regular than Poisson.
    """

    kind: Literal["gamma"]
    rate_per_s: PositiveFloat
    cv: float = Field(ge=1e-3, le=1e3)  # beyond these the gamma's shape (1 / cv**2) leaves float range

    @property
    def is_finite(self) -> bool:
        return False


class RateStage(StrictModel):
    """``duration_s`` seconds of Poisson arrivals at ``rate_per_s`` (0: no arrivals)."""

    duration_s: PositiveFloat
    rate_per_s: NonNegativeFloat


class StagedArrivals(StrictModel):
    """A Poisson process whose rate is piecewise constant: the stages one after another from time 0.

    After the last stage there are no more arrivals, unless ``repeat`` starts the stages over.
    """

    kind: Literal["stages"]
    stages: tuple[RateStage, ...] = Field(min_length=1)
    repeat: bool = False

    @model_validator(mode="after")
    def _some_traffic(self) -> StagedArrivals:
        if all(stage.rate_per_s == 0 for stage in self.stages):
            raise ValueError("every stage has rate_per_s 0: no request would ever arrive")
        return self

    @property
    def is_finite(self) -> bool:
        return not self.repeat


class DiurnalArrivals(StrictModel):
    """A Poisson process with a smooth periodic rate (sampled by thinning):

    ``rate(t) = min_rate_per_s + (peak_rate_per_s - min_rate_per_s) * (1 + cos(2 pi (t - peak_at_s) / period_s)) / 2``.
    ``peak_at_s`` defaults to half a period: the run starts at the quietest moment.
    """

    kind: Literal["diurnal"]
    min_rate_per_s: NonNegativeFloat
    peak_rate_per_s: PositiveFloat
    period_s: PositiveFloat = 86_400.0
    peak_at_s: NonNegativeFloat | None = None

    @model_validator(mode="after")
    def _ordered(self) -> DiurnalArrivals:
        if self.peak_rate_per_s < self.min_rate_per_s:
            raise ValueError(
                f"peak_rate_per_s ({self.peak_rate_per_s}) must be >= min_rate_per_s ({self.min_rate_per_s})"
            )
        return self

    @property
    def is_finite(self) -> bool:
        return False


class FixedTime(StrictModel):
    """Always ``time_s`` seconds."""

    kind: Literal["fixed"]
    time_s: NonNegativeFloat


class ExponentialTime(StrictModel):
    """Exponential with mean ``mean_s`` seconds."""

    kind: Literal["exponential"]
    mean_s: PositiveFloat


class LognormalTime(StrictModel):
    """Lognormal with median ``median_s`` seconds and log-space ``sigma``."""

    kind: Literal["lognormal"]
    median_s: PositiveFloat
    sigma: NonNegativeFloat


ThinkTime = Annotated[FixedTime | ExponentialTime | LognormalTime, Field(discriminator="kind")]


class ClosedLoopArrivals(StrictModel):
    """``num_users`` users, each with one request in flight at a time.

    User ``u`` (0-based) sends its first request at ``u * ramp_up_s / num_users``; when a request ends
    (completed or rejected) its user thinks for ``think_time`` and sends the next. Each user is a
    session (for affinity routing).

    ``client_time_per_request_s`` and ``client_time_per_prompt_token_s`` (per prompt token of the
    request that ended) are a benchmark client's own work on each request that ended, before its user
    thinks and sends the next: one thread does it for every user, one request at a time in the order
    they ended (an asyncio client that tokenizes each finished request's prompt synchronously inside
    its concurrency slot, as the KVWarden harness does: ``profiling/scripts/profiling_utils.py``
    ``_send_request``).

    ``turns_per_conversation`` > 1 makes each user's requests multi-turn chats: a turn's prompt is the
    previous turn's prompt and output followed by a new message (drawn from the tenant's
    ``prompt_tokens``), so with prefix caching it reuses the conversation so far. A new conversation
    starts after that many turns, or earlier when the next turn's prompt and output would exceed
    ``max_context_tokens``.
    """

    kind: Literal["closed_loop"]
    num_users: PositiveInt
    think_time: ThinkTime
    client_time_per_request_s: NonNegativeFloat = 0.0
    client_time_per_prompt_token_s: NonNegativeFloat = 0.0
    ramp_up_s: NonNegativeFloat = 0.0
    turns_per_conversation: PositiveInt = 1
    max_context_tokens: PositiveInt | None = None

    @property
    def is_finite(self) -> bool:
        return False


class ExplicitRequest(StrictModel):
    """One request given in full in the scenario."""

    arrival_at_s: NonNegativeFloat
    prompt_tokens: PositiveInt
    output_tokens: PositiveInt


class ExplicitArrivals(StrictModel):
    """A fixed list of requests, in non-decreasing arrival order."""

    kind: Literal["explicit"]
    requests: tuple[ExplicitRequest, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _sorted(self) -> ExplicitArrivals:
        for i in range(1, len(self.requests)):
            if self.requests[i].arrival_at_s < self.requests[i - 1].arrival_at_s:
                raise ValueError(
                    f"requests[{i}].arrival_at_s ({self.requests[i].arrival_at_s}) is before "
                    f"requests[{i - 1}].arrival_at_s ({self.requests[i - 1].arrival_at_s}); list them in time order"
                )
        return self

    @property
    def is_finite(self) -> bool:
        return True


class TraceArrivals(StrictModel):
    """Replay a request log (``path``, ``format``, ``columns``: as :class:`TraceFile`): each row's arrival and lengths.

    Arrival times count from 0: ``azure`` timestamps from the earliest row's, ``mooncake`` milliseconds
    and ``csv``/``parquet`` seconds as given; then they are multiplied by ``time_scale`` (0.5 replays
    twice as fast). Lengths above ``max_prompt_tokens`` / ``max_output_tokens`` are cut to them.
    Rows out of time order are refused, or sorted (stably) with ``out_of_order: sort``.
    """

    kind: Literal["trace"]
    path: str = Field(min_length=1)
    format: TraceFormat
    columns: TraceColumns | None = None
    time_scale: PositiveFloat = 1.0
    max_prompt_tokens: PositiveInt | None = None
    max_output_tokens: PositiveInt | None = None
    out_of_order: Literal["refuse", "sort"] = "refuse"

    @model_validator(mode="after")
    def _columns_for_plain_formats(self) -> TraceArrivals:
        _check_trace_columns(self.format, self.columns)
        return self

    @property
    def file(self) -> TraceFile:
        return TraceFile(path=self.path, format=self.format, columns=self.columns)

    @property
    def is_finite(self) -> bool:
        return True


ArrivalProcess = Annotated[
    PoissonArrivals
    | GammaArrivals
    | StagedArrivals
    | DiurnalArrivals
    | ClosedLoopArrivals
    | TraceArrivals
    | ExplicitArrivals,
    Field(discriminator="kind"),
]

SELF_CONTAINED_ARRIVALS = ("explicit", "trace")  # arrival kinds whose requests carry their own lengths


class EarlierRun(StrictModel):
    """A benchmark run the server served before this one: its ``k``-th request read the first
    ``prompt_tokens[k]`` tokens of document ``k`` and generated ``output_tokens[k]`` tokens."""

    prompt_tokens: tuple[PositiveInt, ...] = Field(min_length=1)
    output_tokens: tuple[NonNegativeInt, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _one_output_per_prompt(self) -> EarlierRun:
        if len(self.output_tokens) != len(self.prompt_tokens):
            raise ValueError(
                f"output_tokens has {len(self.output_tokens)} values and prompt_tokens {len(self.prompt_tokens)}: "
                "give one output length per prompt"
            )
        return self


class Documents(StrictModel):
    """The tenant's ``k``-th request (in the order it sends them) reads the leading tokens of document
    ``k``, so requests of equal index in this run and in ``earlier_runs`` share their leading tokens
    (a benchmark client that cuts its ``k``-th prompt from its ``k``-th dataset entry: SGLang's
    ``bench_serving --dataset-name random``, ``sample_random_requests``).

    ``earlier_runs``: the runs every replica served before this one, oldest first, whose prompts and
    outputs its prefix cache still holds at the start, as far as it can (least recently used evicted
    first): an engine that keeps its prefix cache between benchmark runs (SGLang's radix cache, unless
    the client flushes it). Needs ``kv.prefix_caching``.
    """

    earlier_runs: tuple[EarlierRun, ...] = ()


class Tenant(StrictModel):
    """One source of traffic: its arrival process and, unless explicit or a trace, its length distributions.

    ``priority``: for the scheduler's ``priority`` ordering (higher first). ``slo``: this tenant's
    targets, replacing the scenario's ``slo`` as a whole.
    """

    name: str = Field(min_length=1)
    arrival: ArrivalProcess
    prompt_tokens: LengthDistribution | None = None
    output_tokens: LengthDistribution | None = None
    priority: int = 0
    slo: SLO | None = None
    shared_prefix_tokens: NonNegativeInt = 0  # a system prompt every request of this tenant starts with
    documents: Documents | None = None  # request k reads document k (see Documents)

    @model_validator(mode="after")
    def _lengths_match_arrivals(self) -> Tenant:
        self_contained = self.arrival.kind in SELF_CONTAINED_ARRIVALS
        for field in ("prompt_tokens", "output_tokens"):
            given = getattr(self, field) is not None
            if self_contained and given:
                raise ValueError(
                    f"{field} must not be set with {self.arrival.kind} arrivals (each request gives its own)"
                )
            if not self_contained and not given:
                raise ValueError(f"{field} is required with {self.arrival.kind} arrivals")
        if self.documents is not None:
            if self_contained:
                raise ValueError(f"documents must not be set with {self.arrival.kind} arrivals (they carry their own)")
            if self.shared_prefix_tokens:
                raise ValueError("documents and shared_prefix_tokens exclude each other: set one")
            if isinstance(self.arrival, ClosedLoopArrivals) and self.arrival.turns_per_conversation > 1:
                raise ValueError("documents and arrival.turns_per_conversation > 1 exclude each other: set one")
        return self


class Workload(StrictModel):
    """All tenants sending traffic to the cluster."""

    tenants: tuple[Tenant, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self) -> Workload:
        seen: set[str] = set()
        for tenant in self.tenants:
            if tenant.name in seen:
                raise ValueError(f"tenant name '{tenant.name}' is used twice")
            seen.add(tenant.name)
        return self
