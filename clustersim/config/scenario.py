"""The scenario schema: YAML is validated into these frozen pydantic models.

Every model forbids unknown keys; closed choices are ``Literal``s; plug-in configs are
discriminated on ``kind``. Nothing here does I/O (see :mod:`clustersim.config.loader`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    field_validator,
    model_validator,
)

from clustersim.errors import did_you_mean
from clustersim.replica.batching import POLICIES


class StrictModel(BaseModel):
    """Base for every config model: frozen, unknown keys rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid")


# ----------------------------------------------------------------------------- SLO
class SLO(StrictModel):
    """Per-request targets; a request meets the SLO when it meets every target given.

    ``percentile`` (optional, in (0, 100)): also judge the run as a whole, as capacity planners
    state targets ("p99 TTFT under 500 ms"): is that percentile of each metric within its target?
    """

    ttft_s: PositiveFloat | None = None
    tpot_s: PositiveFloat | None = None
    e2e_s: PositiveFloat | None = None
    percentile: float | None = Field(default=None, gt=0.0, lt=100.0)

    def targets(self) -> dict[str, float]:
        """The latency targets that are set, by metric name."""
        return {k: v for k in ("ttft_s", "tpot_s", "e2e_s") if (v := getattr(self, k)) is not None}


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
    ``output_tokens``, unless ``lengths_of`` says otherwise. ``max_tokens`` clips.
    """

    kind: Literal["empirical"]
    values: tuple[PositiveInt, ...] | None = Field(default=None, min_length=1)
    trace: TraceFile | None = None
    lengths_of: Literal["prompt", "output"] | None = None
    max_tokens: PositiveInt | None = None

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
    cv: PositiveFloat

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
    """

    kind: Literal["closed_loop"]
    num_users: PositiveInt
    think_time: ThinkTime
    ramp_up_s: NonNegativeFloat = 0.0

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


# ----------------------------------------------------------------------------- cluster
Precision = Literal["bf16", "fp16", "fp8", "fp4"]  # number formats of weights and KV caches
WeightPrecision = Precision
KVPrecision = Literal["bf16", "fp16", "fp8"]


class ReplicaGroup(StrictModel):
    """``count`` replicas that differ from the cluster's defaults (unset fields inherit them)."""

    count: PositiveInt
    hardware: str | None = None
    tensor_parallel: PositiveInt | None = None
    pipeline_parallel: PositiveInt | None = None
    engine: str | None = None
    weight_precision: WeightPrecision | None = None
    kv_cache_precision: KVPrecision | None = None


@dataclass(frozen=True)
class ResolvedGroup:
    """One group of identical replicas with every setting filled in (derived from :class:`Cluster`)."""

    field_path: str  # where its settings come from, for error messages
    count: int
    hardware: str
    tensor_parallel: int
    pipeline_parallel: int
    engine: str
    weight_precision: WeightPrecision | None
    kv_cache_precision: KVPrecision | None


class Cluster(StrictModel):
    """Replicas of one model; each is one model instance over ``tensor_parallel x pipeline_parallel`` GPUs.

    ``weight_precision`` / ``kv_cache_precision`` override the model's own (``None``: weights as
    published, a 16-bit KV cache); FP8/FP4 weights also run GEMMs at the GPU's FP8/FP4 peak.
    ``groups`` makes a heterogeneous cluster (e.g. some H100 TP1 and some A100 TP2 replicas): each
    group's unset fields take the cluster-level values, and ``num_replicas`` is their total.
    """

    num_replicas: PositiveInt = 1
    hardware: str
    model: str
    tensor_parallel: PositiveInt = 1
    pipeline_parallel: PositiveInt = 1
    engine: str = "vllm"
    weight_precision: WeightPrecision | None = None
    kv_cache_precision: KVPrecision | None = None
    groups: tuple[ReplicaGroup, ...] = ()

    @model_validator(mode="after")
    def _groups_count(self) -> Cluster:
        total = sum(g.count for g in self.groups)
        if self.groups and "num_replicas" in self.model_fields_set and self.num_replicas != total:
            raise ValueError(f"num_replicas ({self.num_replicas}) differs from the groups' total count ({total})")
        return self

    @property
    def total_replicas(self) -> int:
        return sum(g.count for g in self.groups) if self.groups else self.num_replicas

    def resolved_groups(self) -> list[ResolvedGroup]:
        """The replica groups in replica order (one group when ``groups`` is empty)."""
        if not self.groups:
            return [
                ResolvedGroup(
                    "cluster", self.num_replicas, self.hardware, self.tensor_parallel, self.pipeline_parallel,
                    self.engine, self.weight_precision, self.kv_cache_precision,
                )
            ]  # fmt: skip
        return [
            ResolvedGroup(
                f"cluster.groups[{i}]",
                g.count,
                g.hardware or self.hardware,
                g.tensor_parallel or self.tensor_parallel,
                g.pipeline_parallel or self.pipeline_parallel,
                g.engine or self.engine,
                g.weight_precision or self.weight_precision,
                g.kv_cache_precision or self.kv_cache_precision,
            )
            for i, g in enumerate(self.groups)
        ]


class RoundRobinRouter(StrictModel):
    """Send request i to replica i mod N."""

    kind: Literal["round_robin"] = "round_robin"


class RandomRouter(StrictModel):
    """A uniformly random replica (the router's own seeded stream)."""

    kind: Literal["random"]


class LeastOutstandingRouter(StrictModel):
    """The replica with the fewest requests queued or running (lowest index on ties)."""

    kind: Literal["least_outstanding"]


class LeastKVRouter(StrictModel):
    """The replica with the smallest fraction of KV blocks in use (then fewest outstanding, lowest index)."""

    kind: Literal["least_kv"]


class PowerOfTwoRouter(StrictModel):
    """Two distinct replicas drawn at random; the one with fewer outstanding requests (the first on ties)."""

    kind: Literal["power_of_two"]


class AffinityRouter(StrictModel):
    """Requests of one session, or with the same leading prefix, go to the same replica unless it is overloaded.

    The key is the session id when the request has one, else its first ``prefix_blocks`` prefix hash
    ids (Mooncake's ``hash_ids``; the first block of that trace is a system prompt every request shares);
    requests without either go to the least-outstanding replica. A new key goes to the least-outstanding
    replica and stays there. Its replica is overloaded when its outstanding requests exceed the least
    loaded replica's by more than ``overload_abs_requests`` and are above ``overload_rel`` times that;
    then the request goes to the least loaded replica and the key moves there with it.
    """

    kind: Literal["affinity"]
    prefix_blocks: PositiveInt = 2
    overload_abs_requests: NonNegativeInt = 8
    overload_rel: float = Field(default=1.5, ge=1.0)


RouterConfig = Annotated[
    RoundRobinRouter | RandomRouter | LeastOutstandingRouter | LeastKVRouter | PowerOfTwoRouter | AffinityRouter,
    Field(discriminator="kind"),
]


class FcfsOrdering(StrictModel):
    """First come, first served."""

    kind: Literal["fcfs"] = "fcfs"


class ShortestPromptFirstOrdering(StrictModel):
    """Shortest prompt first; each second waited counts as ``aging_tokens_per_s`` fewer prompt tokens."""

    kind: Literal["shortest_prompt_first"]
    aging_tokens_per_s: NonNegativeFloat = 1000.0


class PriorityOrdering(StrictModel):
    """Higher tenant ``priority`` first, arrival order within a priority."""

    kind: Literal["priority"]


class FairShareOrdering(StrictModel):
    """Weighted fair share of admitted tokens between tenants (weight 1 for tenants not listed)."""

    kind: Literal["fair_share"]
    weights: dict[str, PositiveFloat] = Field(default_factory=dict)


Ordering = Annotated[
    FcfsOrdering | ShortestPromptFirstOrdering | PriorityOrdering | FairShareOrdering, Field(discriminator="kind")
]


SloAdmissionMode = Literal["off", "defer", "shed"]


class Scheduler(StrictModel):
    """The per-replica iteration scheduler.

    ``static``: request-level batches, formed only when the replica is idle (optionally waiting up
    to ``batch_wait_s`` for a fuller batch) and run to completion. ``continuous`` (Orca): every
    iteration admits whole prompts next to the running decodes. ``vllm``: a step either prefills
    newly admitted prompts (decodes pause) or decodes the running sequences. ``chunked_prefill``
    (Sarathi-Serve): each step's token budget goes first to decodes, then to chunks of prompts.
    ``slo_admission``: ``shed`` rejects a waiting request once it can no longer meet its TTFT
    target; ``defer`` moves it behind requests that still can.
    """

    policy: str = "continuous"
    max_num_seqs: PositiveInt = 256
    max_num_batched_tokens: PositiveInt = 8192
    batch_wait_s: NonNegativeFloat = 0.0
    ordering: Ordering = FcfsOrdering()
    slo_admission: SloAdmissionMode = "off"

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, policy: str) -> str:
        if policy not in POLICIES:
            known = ", ".join(POLICIES.names())
            raise ValueError(f"unknown policy '{policy}'{did_you_mean(policy, POLICIES.names())}; known: {known}")
        return policy

    @model_validator(mode="after")
    def _static_only_waits(self) -> Scheduler:
        if self.batch_wait_s > 0 and self.policy != "static":
            raise ValueError(f"batch_wait_s applies to policy static only, not {self.policy}")
        return self


AllocatorKind = Literal["paged", "contiguous"]
ReserveMode = Literal["max_output", "max_model_len"]
PreemptionMode = Literal["recompute", "swap"]


class KVCache(StrictModel):
    """The KV cache: how it is allocated and how much of the GPU it gets.

    ``allocator: paged`` (vLLM): fixed blocks of ``block_size_tokens`` taken as sequences grow.
    ``preemption``: when a growing sequence finds no free block, the most recently admitted one is
    ``recompute``d (its blocks freed, its prompt and output prefilled again later) or ``swap``ped: its
    blocks copied to host memory over PCIe (at most ``host_swap_bytes`` per replica; beyond that it
    is recomputed) and back before any new request is admitted (vLLM's V0 policy).
    ``contiguous`` (FasterTransformer, Orca): each request reserves one region on admission, for its
    prompt plus ``max_output_tokens`` (``reserve: max_output``) or for the model's maximum length
    (``reserve: max_model_len``, or ``max_model_len_tokens`` if set), placed first-fit in a linear
    space. Capacity is ``gpu_memory_frac`` of GPU memory minus the weights (and the activation
    reserve), unless ``num_blocks`` fixes it. Admission keeps ``watermark_frac`` of the blocks free
    as headroom for running sequences to grow into.
    """

    allocator: AllocatorKind = "paged"
    block_size_tokens: PositiveInt = 16
    gpu_memory_frac: float = Field(default=0.9, gt=0.0, le=1.0)
    num_blocks: PositiveInt | None = None
    watermark_frac: float = Field(default=0.0, ge=0.0, lt=1.0)
    reserve: ReserveMode = "max_output"
    max_output_tokens: PositiveInt = 2048
    max_model_len_tokens: PositiveInt | None = None
    prefix_caching: bool = False
    prefix_block_tokens: PositiveInt = 512
    preemption: PreemptionMode = "recompute"
    host_swap_bytes: NonNegativeFloat = 4 * 2**30

    @model_validator(mode="after")
    def _prefix_caching_needs_paged(self) -> KVCache:
        if self.prefix_caching and self.allocator != "paged":
            raise ValueError("prefix_caching needs allocator: paged (cached blocks are shared pages)")
        if self.prefix_caching and self.prefix_block_tokens % self.block_size_tokens:
            raise ValueError(
                f"prefix_block_tokens ({self.prefix_block_tokens}) must be a multiple of block_size_tokens "
                f"({self.block_size_tokens})"
            )
        return self


class RooflineCost(StrictModel):
    """Price each step with the roofline model of :mod:`clustersim.cost.roofline`."""

    kind: Literal["roofline"] = "roofline"


class UnitCost(StrictModel):
    """Every step takes exactly ``step_time_s`` (the teaching mode)."""

    kind: Literal["unit"]
    step_time_s: PositiveFloat = 1.0


CostModel = Annotated[RooflineCost | UnitCost, Field(discriminator="kind")]


class Stop(StrictModel):
    """When the run ends.

    ``max_requests``: no arrivals after this many (over all tenants); the run drains.
    ``horizon_s``: the clock stops here; requests still in flight are reported unfinished.
    """

    max_requests: PositiveInt | None = None
    horizon_s: PositiveFloat | None = None


class Simulation(StrictModel):
    """How the simulator advances time (never changes results beyond float rounding).

    ``fast_forward``: advance each run of identical decode steps (between arrivals that can be
    admitted, finishes and KV exhaustion) in one event, with its closed-form duration. Off, every
    iteration is its own event: the reference the fast path is tested against.
    """

    fast_forward: bool = True


class Scenario(StrictModel):
    """One simulation: traffic, cluster, scheduler, KV cache, cost model and stop condition."""

    name: str = "scenario"
    description: str = ""
    seed: int = Field(default=0, ge=0)
    workload: Workload
    cluster: Cluster
    router: RouterConfig = RoundRobinRouter()
    scheduler: Scheduler = Scheduler()
    kv: KVCache = KVCache()
    cost: CostModel = RooflineCost()
    stop: Stop = Stop()
    slo: SLO | None = None
    simulation: Simulation = Simulation()

    @model_validator(mode="after")
    def _stops(self) -> Scenario:
        if self.stop.max_requests is None and self.stop.horizon_s is None:
            open_ended = [t.name for t in self.workload.tenants if not t.arrival.is_finite]
            if open_ended:
                raise ValueError(
                    f"stop: set max_requests or horizon_s; tenant '{open_ended[0]}' never stops sending requests"
                )
        return self


def tenant_slo(scenario: Scenario, tenant: Tenant) -> SLO | None:
    """The targets a tenant's requests are held to: its own ``slo``, else the scenario's."""
    return tenant.slo if tenant.slo is not None else scenario.slo
