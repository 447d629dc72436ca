"""The scenario schema: YAML is validated into these frozen pydantic models (traffic: :mod:`.workload`).

Every model forbids unknown keys; closed choices are ``Literal``s; plug-in configs are
discriminated on ``kind``. Nothing here does I/O (see :mod:`clustersim.config.loader`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import (
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    field_validator,
    model_validator,
)

from clustersim.config.base import SLO, StrictModel
from clustersim.config.disagg import Disaggregation
from clustersim.config.faults import Autoscaler, Faults, ScriptedFaults
from clustersim.config.profiles import Precision as Precision  # re-exported: the scenario fields' type
from clustersim.config.profiles import WeightScaling
from clustersim.config.releases import checked_release
from clustersim.config.reserve import DecodeReserve
from clustersim.config.routing import RoundRobinRouter, RouterConfig
from clustersim.config.speculative import Speculative
from clustersim.config.window import Metrics
from clustersim.config.workload import (
    Tenant,
    Workload,
)
from clustersim.errors import did_you_mean
from clustersim.replica.batching import POLICIES

# ----------------------------------------------------------------------------- cluster
WeightPrecision = Precision
KVPrecision = Literal["bf16", "fp16", "fp8"]
Role = Literal["both", "prefill", "decode"]  # what a replica serves: whole requests, or one phase (disaggregation)


class ReplicaGroup(StrictModel):
    """``count`` replicas that differ from the cluster's defaults (unset fields inherit them)."""

    count: PositiveInt
    hardware: str | None = None
    tensor_parallel: PositiveInt | None = None
    pipeline_parallel: PositiveInt | None = None
    engine: str | None = None
    weight_precision: WeightPrecision | None = None
    weight_scaling: WeightScaling | None = None
    kv_cache_precision: KVPrecision | None = None
    role: Role = "both"


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
    role: Role = "both"
    weight_scaling: WeightScaling | None = None


MAX_REPLICAS = 100_000  # far beyond any single deployment; a million would take minutes and gigabytes just to start


class Cluster(StrictModel):
    """Replicas of one model; each is one model instance over ``tensor_parallel x pipeline_parallel`` GPUs.

    ``weight_precision`` / ``kv_cache_precision`` override the model's own (``None``: weights as
    published, a 16-bit KV cache); FP8/FP4 weights also run GEMMs at the GPU's FP8/FP4 peak.
    ``weight_scaling``: how FP8 weights carry their scales, ``tensor`` (per tensor or output channel, as
    ModelOpt, llm-compressor and ``--quantization fp8`` checkpoints do) or ``block`` (per 128 x 128 block,
    DeepSeek-V3's format and ``Qwen/*-FP8``'s); unset: the published checkpoint's when the weights keep
    its precision (the model profile's ``weight_scaling``), else ``tensor``.
    ``groups`` makes a heterogeneous cluster (e.g. some H100 TP1 and some A100 TP2 replicas): each
    group's unset fields take the cluster-level values, and ``num_replicas`` is their total.
    ``frontend``: requests reach each replica through its engine's HTTP front end (the API server
    that parses, tokenizes and streams back, one request at a time: the engine profile's
    ``frontend_*`` costs); ``false``: through the engine's offline API, with no such cost (nor with
    ``cost: {kind: unit}``, which prices no engine). ``cuda_graphs: false``: the engine launches every
    kernel eagerly (vLLM ``--enforce-eager``, SGLang ``--disable-cuda-graph``). ``engine_version``: the
    engines' release (e.g. ``"0.4.2"``); kernels an engine profile gained in a later release
    (its ``kernel_releases``) are then slower by their cited factors. Unset: each profile's current release.
    ``async_scheduling``: the engine schedules the next step while the GPU runs this one (vLLM
    ``--async-scheduling``), hiding the engine profile's ``host_overlap_frac`` of its host time; unset:
    as the engine does by default in ``engine_version`` (vLLM from 0.14.0).
    """

    num_replicas: PositiveInt = 1
    hardware: str
    model: str
    tensor_parallel: PositiveInt = 1
    pipeline_parallel: PositiveInt = 1
    engine: str = "vllm"
    weight_precision: WeightPrecision | None = None
    weight_scaling: WeightScaling | None = None
    kv_cache_precision: KVPrecision | None = None
    groups: tuple[ReplicaGroup, ...] = ()
    frontend: bool = True
    cuda_graphs: bool = True
    engine_version: str | None = None
    async_scheduling: bool | None = None

    @field_validator("engine_version")
    @classmethod
    def _release(cls, text: str | None) -> str | None:
        return None if text is None else checked_release(text)

    @model_validator(mode="after")
    def _groups_count(self) -> Cluster:
        total = sum(g.count for g in self.groups)
        if self.groups and "num_replicas" in self.model_fields_set and self.num_replicas != total:
            raise ValueError(f"num_replicas ({self.num_replicas}) differs from the groups' total count ({total})")
        if self.total_replicas > MAX_REPLICAS:
            raise ValueError(
                f"{self.total_replicas} replicas is more than clustersim simulates ({MAX_REPLICAS:,}; "
                "each replica costs about 10 KB and its own scheduler)"
            )
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
                    weight_scaling=self.weight_scaling,
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
                g.role,
                g.weight_scaling or self.weight_scaling,
            )
            for i, g in enumerate(self.groups)
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
    target; ``defer`` moves it behind requests that still can. ``long_prefill_token_threshold`` (policies
    that chunk prompts; 0: none): a prompt gets at most that many tokens in one step, so several prompts
    prefill side by side (vLLM's ``--long-prefill-token-threshold``: ``vllm/v1/core/sched/scheduler.py``
    caps ``num_new_tokens`` at it for running and waiting requests alike). ``num_scheduler_steps``
    (policy ``vllm_v0``; 1: every step): vLLM V0's multi-step scheduling, ``--num-scheduler-steps``: a
    scheduled decode batch runs that many steps before the scheduler runs again, so a prompt arriving
    meanwhile waits for the run's end, and the scheduling and input preparation are paid once per run.
    ``decode_reserve`` (unset: none): admission holds back KV for the tokens the running requests may
    still make, SGLang's ``new_token_ratio`` (:class:`~clustersim.config.reserve.DecodeReserve`; the
    ``sglang`` engine sets it).
    """

    policy: str = "continuous"
    max_num_seqs: PositiveInt = 256
    max_num_batched_tokens: PositiveInt = 8192
    batch_wait_s: NonNegativeFloat = 0.0
    ordering: Ordering = FcfsOrdering()
    slo_admission: SloAdmissionMode = "off"
    long_prefill_token_threshold: NonNegativeInt = 0
    num_scheduler_steps: PositiveInt = 1
    decode_reserve: DecodeReserve | None = None

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, policy: str) -> str:
        if policy == "vllm":
            raise ValueError(
                "'vllm' is ambiguous: use vllm_v1 (today's vLLM: one token budget, chunked prefill, KV per chunk) "
                "or vllm_v0 (vLLM <= 0.6: prefill-only steps that pause the decodes)"
            )
        if policy not in POLICIES:
            known = ", ".join(POLICIES.names())
            raise ValueError(f"unknown policy '{policy}'{did_you_mean(policy, POLICIES.names())}; known: {known}")
        return policy

    @model_validator(mode="after")
    def _static_only_waits(self) -> Scheduler:
        if self.batch_wait_s > 0 and self.policy != "static":
            raise ValueError(f"batch_wait_s applies to policy static only, not {self.policy}")
        return self

    @model_validator(mode="after")
    def _budget_holds_a_decode_step(self) -> Scheduler:
        # a decode step batches one token per running sequence; vLLM refuses the same configuration
        # (SchedulerConfig: max_num_batched_tokens must be >= max_num_seqs)
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be at least max_num_seqs "
                f"({self.max_num_seqs}): a decode step batches one token per sequence"
            )
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
    """One simulation: traffic, cluster, scheduler, KV cache, cost model, stop condition, what the summary measures."""

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
    metrics: Metrics = Metrics()
    simulation: Simulation = Simulation()
    faults: Faults | None = None
    autoscaler: Autoscaler | None = None
    disaggregation: Disaggregation | None = None
    speculative: Speculative | None = None

    @property
    def moves_replicas(self) -> bool:
        """Whether replicas fail or are started and stopped (the run has a lifecycle)."""
        return self.faults is not None or bool(self.autoscalers())

    def autoscalers(self) -> dict[str, Autoscaler]:
        """The autoscalers by the role of the replicas each scales (``both``: the whole cluster)."""
        if self.autoscaler is not None:
            return {"both": self.autoscaler}
        pools = self.disaggregation.autoscaler if self.disaggregation is not None else None
        return pools.by_role() if pools is not None else {}

    @property
    def disaggregated(self) -> bool:
        """Whether prompts and decodes run on separate replica pools."""
        return self.disaggregation is not None

    @model_validator(mode="after")
    def _disaggregation(self) -> Scenario:
        roles = {g.role for g in self.cluster.groups}
        if self.disaggregation is None:
            if roles - {"both"}:
                raise ValueError("cluster.groups: a group has a prefill or decode role; add a disaggregation section")
            return self
        if roles != {"prefill", "decode"}:
            raise ValueError(
                "cluster.groups: disaggregation needs groups with role: prefill and groups with role: decode "
                f"(and no role: both); the roles are {sorted(roles) or ['both']}"
            )
        if self.autoscaler is not None:
            raise ValueError(
                "autoscaler: a disaggregated scenario scales each pool on its own; "
                "move it to disaggregation.autoscaler.prefill or disaggregation.autoscaler.decode"
            )
        clashes = [
            ("scheduler.slo_admission", self.scheduler.slo_admission != "off"),
            ("kv.allocator", self.kv.allocator != "paged"),
        ]
        for name, clash in clashes:
            if clash:
                raise ValueError(f"{name}: not supported with disaggregation yet (remove one of them)")
        return self

    @model_validator(mode="after")
    def _autoscaler_bounds(self) -> Scenario:
        for role, scaler in self.autoscalers().items():
            where = "autoscaler" if role == "both" else f"disaggregation.autoscaler.{role}"
            count = sum(g.count for g in self.cluster.resolved_groups() if role in ("both", g.role))
            pool, most = ("pool", "num_replicas") if role == "both" else (f"{role} pool", f"{role} replicas")
            if scaler.min_replicas > count:
                where_most = "cluster.num_replicas is" if role == "both" else f"the count of its role: {role} groups is"
                raise ValueError(
                    f"{where}.min_replicas: {scaler.min_replicas} is more than the {pool}'s {count} replicas "
                    f"({where_most} the most the autoscaler may start)"
                )
            initial = scaler.initial_replicas
            if initial is not None and not scaler.min_replicas <= initial <= count:
                raise ValueError(
                    f"{where}.initial_replicas: {initial} is outside min_replicas..{most} "
                    f"({scaler.min_replicas}..{count})"
                )
        return self

    @model_validator(mode="after")
    def _acceptance_tenants(self) -> Scenario:
        if self.speculative is not None:
            names = [t.name for t in self.workload.tenants]
            for tenant in self.speculative.tenant_acceptance_rates:
                if tenant not in names:
                    raise ValueError(
                        f"speculative.tenant_acceptance_rates.{tenant}: no such tenant{did_you_mean(tenant, names)}; "
                        f"the tenants: {', '.join(names)}"
                    )
        return self

    @model_validator(mode="after")
    def _fault_replicas(self) -> Scenario:
        if isinstance(self.faults, ScriptedFaults):
            count = self.cluster.total_replicas
            for index, event in enumerate(self.faults.events):
                if event.replica >= count:
                    raise ValueError(
                        f"faults.events[{index}].replica: {event.replica} is not a replica of this cluster "
                        f"(replicas 0-{count - 1})"
                    )
        return self

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
