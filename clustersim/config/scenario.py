"""The scenario schema: YAML is validated into these frozen pydantic models.

Every model forbids unknown keys; closed choices are ``Literal``s; plug-in configs are
discriminated on ``kind``. Nothing here does I/O (see :mod:`clustersim.config.loader`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator


class StrictModel(BaseModel):
    """Base for every config model: frozen, unknown keys rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid")


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


LengthDistribution = Annotated[FixedLengths | UniformLengths | LognormalLengths, Field(discriminator="kind")]


# ----------------------------------------------------------------------------- arrivals
class PoissonArrivals(StrictModel):
    """Exponential inter-arrival times at ``rate_per_s`` requests per second."""

    kind: Literal["poisson"]
    rate_per_s: PositiveFloat


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


ArrivalProcess = Annotated[PoissonArrivals | ExplicitArrivals, Field(discriminator="kind")]


class Tenant(StrictModel):
    """One source of traffic: its arrival process and, unless explicit, its length distributions."""

    name: str = Field(min_length=1)
    arrival: ArrivalProcess
    prompt_tokens: LengthDistribution | None = None
    output_tokens: LengthDistribution | None = None

    @model_validator(mode="after")
    def _lengths_match_arrivals(self) -> Tenant:
        explicit = isinstance(self.arrival, ExplicitArrivals)
        for field in ("prompt_tokens", "output_tokens"):
            given = getattr(self, field) is not None
            if explicit and given:
                raise ValueError(f"{field} must not be set with explicit arrivals (each request gives its own)")
            if not explicit and not given:
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
class Cluster(StrictModel):
    """Identical replicas; each is one model instance over ``tensor_parallel x pipeline_parallel`` GPUs.

    ``weight_precision`` / ``kv_cache_precision`` override the model's own (``None``: weights as
    published, a 16-bit KV cache); FP8/FP4 weights also run GEMMs at the GPU's FP8/FP4 peak.
    """

    num_replicas: PositiveInt = 1
    hardware: str
    model: str
    tensor_parallel: PositiveInt = 1
    pipeline_parallel: PositiveInt = 1
    engine: str = "vllm"
    weight_precision: Literal["bf16", "fp16", "fp8", "fp4"] | None = None
    kv_cache_precision: Literal["bf16", "fp16", "fp8"] | None = None


class RoundRobinRouter(StrictModel):
    """Send request i to replica i mod N."""

    kind: Literal["round_robin"] = "round_robin"


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

    policy: Literal["static", "continuous", "vllm", "chunked_prefill"] = "continuous"
    max_num_seqs: PositiveInt = 256
    max_num_batched_tokens: PositiveInt = 8192
    batch_wait_s: NonNegativeFloat = 0.0
    ordering: Ordering = FcfsOrdering()
    slo_admission: Literal["off", "defer", "shed"] = "off"

    @model_validator(mode="after")
    def _static_only_waits(self) -> Scheduler:
        if self.batch_wait_s > 0 and self.policy != "static":
            raise ValueError(f"batch_wait_s applies to policy static only, not {self.policy}")
        return self


class KVCache(StrictModel):
    """Paged KV cache: blocks of ``block_size_tokens`` tokens.

    Capacity is ``gpu_memory_frac`` of GPU memory minus the weights, unless ``num_blocks``
    overrides it (useful for teaching scenarios and tests).
    """

    block_size_tokens: PositiveInt = 16
    gpu_memory_frac: float = Field(default=0.9, gt=0.0, le=1.0)
    num_blocks: PositiveInt | None = None


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


class SLO(StrictModel):
    """Per-request targets; a request meets the SLO when it meets every target given."""

    ttft_s: PositiveFloat | None = None
    tpot_s: PositiveFloat | None = None
    e2e_s: PositiveFloat | None = None


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
    router: RoundRobinRouter = RoundRobinRouter()
    scheduler: Scheduler = Scheduler()
    kv: KVCache = KVCache()
    cost: CostModel = RooflineCost()
    stop: Stop = Stop()
    slo: SLO | None = None
    simulation: Simulation = Simulation()

    @model_validator(mode="after")
    def _stops(self) -> Scenario:
        if self.stop.max_requests is None and self.stop.horizon_s is None:
            open_ended = [t.name for t in self.workload.tenants if not isinstance(t.arrival, ExplicitArrivals)]
            if open_ended:
                raise ValueError(
                    f"stop: set max_requests or horizon_s; tenant '{open_ended[0]}' never stops sending requests"
                )
        return self
