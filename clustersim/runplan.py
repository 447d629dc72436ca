"""Scenario + catalogue -> a frozen run plan: every cross-field and catalogue check happens here.

A scenario that validates field by field can still be impossible as a whole (a model that does not
fit the GPU, SLO-aware admission without a TTFT target, prefix caching with a policy that reserves
whole sequences). :func:`plan_run` finds each such problem, raises one :class:`ConfigError` naming
the field, and otherwise resolves the profiles into plain numbers the simulation wires up
(:mod:`clustersim.sim`). Nothing here starts a clock or writes a file.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from clustersim.architecture import (
    GpuSpec,
    KVMemory,
    ModelShape,
    activation_reserve_bytes,
    engine_kv_memory,
    kv_bytes_per_token_per_gpu,
    overlaps_host,
)
from clustersim.config.base import SLO
from clustersim.config.catalogue import Catalogue
from clustersim.config.engine_defaults import engine_seqs_rule, reported_memory_bytes, with_engine_defaults
from clustersim.config.loader import LoadedScenario
from clustersim.config.memorytiers import memory_settings
from clustersim.config.profiles import EngineProfile, HardwareProfile
from clustersim.config.reserve import SeqsRule
from clustersim.config.scenario import Cluster, ResolvedGroup, Scenario, tenant_slo
from clustersim.cost import COST_MODELS, CostModel
from clustersim.cost.pipeline import PipelinedCostModel
from clustersim.errors import ConfigError
from clustersim.kvcache import ALLOCATORS, KVManager, KVSpec
from clustersim.kvcache.sequence import Reservation, Reserve
from clustersim.replica.batching import POLICIES, BatchingPolicy, StepLimits
from clustersim.replica.core import ReplicaSpec
from clustersim.specplan import NO_PROPOSER, Proposer, proposer, speculative_cost
from clustersim.workload.documents import WarmSegment, warm_segments

GIB = 2.0**30


@dataclass(frozen=True)
class GroupPlan:
    """``count`` identical replicas: their model, GPU, parallelism, KV capacity and cost model."""

    field_path: str  # where its settings come from, for messages
    count: int
    model: ModelShape
    gpu: GpuSpec
    tensor_parallel: int
    pipeline_parallel: int
    num_kv_blocks: int
    kv_bytes_per_token: float  # over all the replica's GPUs
    cost_model: CostModel  # shared by the group's replicas (its memoised prices too)
    role: str = "both"  # both | prefill | decode (disaggregation)
    kv_memory: KVMemory | None = None  # how one GPU's memory splits, by the engine's rule


@dataclass(frozen=True)
class RunPlan:
    """Everything one run needs, resolved and checked; built only by :func:`plan_run`."""

    scenario: Scenario
    source: str  # the scenario's file, for messages
    base_dir: Path  # relative trace and profile paths resolve here
    groups: tuple[GroupPlan, ...]
    policy: type[BatchingPolicy]
    allocator: type[KVManager]
    limits: StepLimits
    reserve: Reserve
    ttft_targets_s: Mapping[str, float]
    tenant_slos: Mapping[str, SLO | None]
    priorities: Mapping[str, int]
    warm_segments: tuple[WarmSegment, ...] = ()  # what the tenants' earlier runs left in each prefix cache
    seqs_rule: SeqsRule | None = None  # the engine's running-request cap by each replica's KV pool

    @property
    def num_replicas(self) -> int:
        return sum(group.count for group in self.groups)

    def replica_groups(self) -> list[GroupPlan]:
        """Each replica's group, in replica order."""
        return [group for group in self.groups for _ in range(group.count)]

    def kv_spec(self, group: GroupPlan) -> KVSpec:
        """The KV cache of one replica of ``group``."""
        kv = self.scenario.kv
        block_bytes = group.kv_bytes_per_token * kv.block_size_tokens
        return KVSpec(
            num_blocks=group.num_kv_blocks,
            reserve=self.reserve,
            watermark_blocks=math.ceil(kv.watermark_frac * group.num_kv_blocks),
            bytes_per_token=group.kv_bytes_per_token,
            prefix_caching=kv.prefix_caching,
            prefix_block_tokens=kv.prefix_block_tokens,
            shared_prefix_tokens={t.name: t.shared_prefix_tokens for t in self.scenario.workload.tenants},
            host_swap_blocks=int(kv.host_swap_bytes // block_bytes) if kv.preemption == "swap" else 0,
            warm_segments=self.warm_segments,
        )

    def group_limits(self, group: GroupPlan) -> StepLimits:
        """The step limits of one replica of ``group``: its ``max_num_seqs`` by its KV pool where the
        engine sizes it so (:attr:`seqs_rule`); with pipeline parallelism a micro-batch per stage, each
        with the scheduler's token budget, and its ``max_num_seqs`` too where the engine sets it per
        micro-batch (:mod:`clustersim.cost.pipeline`)."""
        limits, pp = self.limits, group.pipeline_parallel
        if self.seqs_rule is not None:
            kv_tokens = group.num_kv_blocks * self.scenario.kv.block_size_tokens
            seqs = self.seqs_rule.max_seqs(kv_tokens, group.model.max_model_len_tokens)
            limits = dataclasses.replace(limits, max_num_seqs=seqs)
        if pp == 1:
            return limits
        seqs = limits.max_num_seqs * (pp if self.policy.seqs_per_micro_batch else 1)
        return dataclasses.replace(limits, max_num_seqs=seqs, num_micro_batches=pp)

    def replica_spec(self, index: int, group: GroupPlan) -> ReplicaSpec:
        return ReplicaSpec(
            index=index,
            limits=self.group_limits(group),
            max_model_len_tokens=group.model.max_model_len_tokens,
            fast_forward=self.scenario.simulation.fast_forward,
            pcie_bandwidth_bytes_per_s=group.gpu.pcie_bandwidth_bytes_per_s or 0.0,
            role=group.role,
        )


def plan_run(loaded: LoadedScenario, catalogue: Catalogue | None = None) -> RunPlan:
    """Resolve and check a loaded scenario against the catalogue (the built-in one by default)."""
    source = loaded.source
    catalogue = dataclasses.replace(catalogue or Catalogue.builtin(), base_dir=loaded.base_dir)
    scenario = effective_scenario(loaded.scenario, source, catalogue)
    policy = POLICIES.get(scenario.scheduler.policy)
    ttft_targets = ttft_targets_s(scenario)
    engine_policy = "policy" not in loaded.scenario.scheduler.model_fields_set
    _check_scheduler(scenario, source, policy, ttft_targets, engine_policy)
    groups = tuple(plan_group(scenario, group, source, catalogue) for group in scenario.cluster.resolved_groups())
    sched = scenario.scheduler
    return RunPlan(
        scenario=scenario,
        source=source,
        base_dir=loaded.base_dir,
        groups=groups,
        policy=policy,
        allocator=ALLOCATORS.get(scenario.kv.allocator),
        limits=StepLimits(
            sched.max_num_seqs,
            sched.max_num_batched_tokens,
            sched.batch_wait_s,
            sched.long_prefill_token_threshold,
            sched.num_scheduler_steps,
            decode_reserve=sched.decode_reserve,
        ),
        reserve=kv_reserve(scenario, policy, groups[0].model.max_model_len_tokens),
        ttft_targets_s=ttft_targets,
        tenant_slos={tenant.name: tenant_slo(scenario, tenant) for tenant in scenario.workload.tenants},
        priorities={tenant.name: tenant.priority for tenant in scenario.workload.tenants},
        warm_segments=warm_segments(
            scenario.workload.tenants, scenario.kv.prefix_block_tokens, scenario.kv.block_size_tokens
        )
        if scenario.kv.prefix_caching
        else (),
        seqs_rule=engine_seqs_rule(catalogue.engine(scenario.cluster.engine, source), loaded.scenario),
    )


def effective_scenario(scenario: Scenario, source: str, catalogue: Catalogue) -> Scenario:
    """The scenario with its cluster engine's scheduler and KV defaults where it sets nothing itself."""
    engine = catalogue.engine(scenario.cluster.engine, source)
    hardware = catalogue.hardware(scenario.cluster.hardware, source)
    try:
        return with_engine_defaults(scenario, engine, hardware)
    except ValueError as exc:
        raise ConfigError(source, "scheduler", str(exc)) from None


def _able(capability: str) -> str:
    """The policies that have ``capability`` (a :class:`BatchingPolicy` flag), for an error message."""
    return ", ".join(name for name in POLICIES.names() if getattr(POLICIES.get(name), capability))


def _check_scheduler(
    scenario: Scenario,
    source: str,
    policy: type[BatchingPolicy],
    ttft_targets: Mapping[str, float],
    engine_policy: bool = False,
) -> None:
    """Settings that are fine alone but not together (``engine_policy``: the policy is the engine's default)."""
    whose = (
        f" (the policy of engine {scenario.cluster.engine}; set scheduler.policy to choose another)"
        if engine_policy
        else ""
    )
    if scenario.scheduler.slo_admission != "off" and not ttft_targets:
        raise ConfigError(
            source,
            "scheduler.slo_admission",
            f"'{scenario.scheduler.slo_admission}' needs a TTFT target: set slo.ttft_s (or a tenant's slo.ttft_s)",
        )
    if scenario.scheduler.long_prefill_token_threshold > 0 and not policy.chunks_prompts:
        problem = f"caps each prompt's chunk in a step: {policy.kind}{whose} does not chunk prompts"
        raise ConfigError(source, "scheduler.long_prefill_token_threshold", f"{problem} ({_able('chunks_prompts')} do)")
    if scenario.scheduler.num_scheduler_steps > 1 and not policy.multi_step:
        problem = f"runs decode steps between scheduler calls: {policy.kind}{whose} schedules every step"
        raise ConfigError(source, "scheduler.num_scheduler_steps", f"{problem} ({_able('multi_step')} can)")
    kv = scenario.kv
    if kv.prefix_caching and kv.preemption == "swap":
        raise ConfigError(
            source,
            "kv.preemption",
            "swap cannot be combined with kv.prefix_caching (a swapped-out sequence would hold cached blocks "
            "other sequences share); use recompute, which reuses the cached prefix when the request comes back",
        )
    if policy.kv_per_chunk and kv.allocator != "paged":
        raise ConfigError(
            source, "kv.allocator", f"{policy.kind}{whose} takes KV blocks chunk by chunk: it needs allocator: paged"
        )
    if policy.kv_per_chunk and kv.preemption == "swap":
        raise ConfigError(
            source, "kv.preemption", f"{policy.kind}{whose} preempts by recompute only (vLLM V1 has no swap space)"
        )
    for index, tenant in enumerate(scenario.workload.tenants):
        if tenant.documents is not None and tenant.documents.earlier_runs and not kv.prefix_caching:
            raise ConfigError(
                source,
                f"workload.tenants[{index}].documents.earlier_runs",
                "what earlier runs left is kept in the prefix cache: set kv.prefix_caching: true "
                f"(engine {scenario.cluster.engine} leaves it off, or the scenario turns it off)",
            )
    if kv.prefix_caching and policy.whole_sequence_kv:
        growing = ", ".join(name for name in POLICIES.names() if not POLICIES.get(name).whole_sequence_kv)
        raise ConfigError(
            source,
            "kv.prefix_caching",
            f"needs an iteration-level policy ({growing}): {policy.kind} reserves whole sequences",
        )


def kv_reserve(scenario: Scenario, policy: type[BatchingPolicy], model_max_len_tokens: int) -> Reserve:
    """How sequences reserve KV blocks: contiguous regions, whole sequences (static), or growing."""
    kv = scenario.kv
    reservation: Reservation = "grow"
    reserve_tokens = 0
    if kv.allocator == "contiguous":
        reservation = kv.reserve
        reserve_tokens = (
            kv.max_output_tokens if kv.reserve == "max_output" else kv.max_model_len_tokens or model_max_len_tokens
        )
    elif policy.whole_sequence_kv:
        reservation = "sequence"
    return Reserve(kv.block_size_tokens, reservation, reserve_tokens)


def ttft_targets_s(scenario: Scenario) -> dict[str, float]:
    """Each tenant's TTFT target: its own SLO's, else the scenario's (tenants without one are absent)."""
    targets: dict[str, float] = {}
    for tenant in scenario.workload.tenants:
        target = tenant.slo.ttft_s if tenant.slo is not None else None
        if target is None and scenario.slo is not None:
            target = scenario.slo.ttft_s
        if target is not None:
            targets[tenant.name] = target
    return targets


def with_memory_sized_graphs(
    gpu: GpuSpec, engine: EngineProfile, hardware: HardwareProfile, version: str | None, tp: int, pp: int
) -> GpuSpec:
    """``gpu`` with the CUDA-graph cap the engine's release picks by the GPU's memory and TP degree
    (``kv.gpu_memory_rule``: SGLang from 0.5.3), or as it is."""
    rule = engine.kv.gpu_memory_rule if engine.kv is not None else None
    if rule is None or not rule.value.applies_to(version):
        return gpu
    graphs = memory_settings(rule.value, reported_memory_bytes(hardware), tp, pp).graph_seqs
    return dataclasses.replace(gpu, engine=dataclasses.replace(gpu.engine, cuda_graph_max_seqs=graphs))


def multi_step_host(gpu: GpuSpec, num_scheduler_steps: int) -> GpuSpec:
    """With multi-step scheduling the scheduler and the input preparation run once per run of
    ``num_scheduler_steps`` decode steps (vLLM PR #7000: the next step's inputs are advanced on the
    GPU, ``advance_step``): the step's fixed and per-sequence host times, spread over the run (prompt
    steps, one in a run of their own, are charged the same share: they are a small part of a decode-bound
    run)."""
    if num_scheduler_steps <= 1:
        return gpu
    engine = dataclasses.replace(gpu.engine, per_seq_overhead_s=gpu.engine.per_seq_overhead_s / num_scheduler_steps)
    return dataclasses.replace(gpu, step_overhead_s=gpu.step_overhead_s / num_scheduler_steps, engine=engine)


def with_async_scheduling(gpu: GpuSpec, engine: EngineProfile, cluster: Cluster, source: str) -> GpuSpec:
    """``gpu`` with its host time overlapped or in series as the run does it (``overlaps_host``: the
    deployment's ``cluster.async_scheduling``, else its release's default); an engine that overlaps none
    cannot be asked to."""
    frac = engine.host_overlap_frac
    if cluster.async_scheduling and frac is None:
        problem = f"true, but engine '{engine.name}' overlaps none of its host time (no host_overlap_frac)"
        raise ConfigError(source, "cluster.async_scheduling", problem)
    overlapped = frac is not None and overlaps_host(engine, cluster.engine_version, cluster.async_scheduling)
    engine_spec = dataclasses.replace(gpu.engine, host_overlap_frac=frac.value if overlapped and frac else 0.0)
    return dataclasses.replace(gpu, engine=engine_spec)


def plan_group(scenario: Scenario, group: ResolvedGroup, source: str, catalogue: Catalogue) -> GroupPlan:
    """Look up one replica group's profiles, check the model fits, size the KV cache and build the cost model."""
    where_from = group.field_path
    hardware = catalogue.hardware(group.hardware, source, f"{where_from}.hardware")
    model_profile = catalogue.model(scenario.cluster.model, source)
    engine = catalogue.engine(group.engine, source, f"{where_from}.engine")
    try:
        model = ModelShape.from_profile(
            model_profile, group.weight_precision, group.kv_cache_precision, group.weight_scaling
        )
    except ValueError as e:
        raise ConfigError(source, f"{where_from}.weight_scaling", str(e).removeprefix("weight_scaling: ")) from None
    gpu = GpuSpec.from_profiles(hardware, engine, scenario.cluster.engine_version)
    model = model.with_sliding_window_kv_share(gpu.engine.sliding_window_kv_share)
    tp, pp = group.tensor_parallel, group.pipeline_parallel
    gpu = with_memory_sized_graphs(gpu, engine, hardware, scenario.cluster.engine_version, tp, pp)
    gpu = with_async_scheduling(gpu, engine, scenario.cluster, source)
    if not scenario.cluster.cuda_graphs:  # every kernel launched eagerly, nothing compiled
        engine_spec = dataclasses.replace(gpu.engine, cuda_graph_max_seqs=0, launch_overhead_per_layer_compiled_s=0.0)
        gpu = dataclasses.replace(gpu, engine=engine_spec)
    if tp * pp > 1 and gpu.engine.step_overhead_per_worker_s:  # the step's inputs go to every worker
        gpu = dataclasses.replace(
            gpu, step_overhead_s=gpu.step_overhead_s + (tp * pp - 1) * gpu.engine.step_overhead_per_worker_s
        )
    gpu = multi_step_host(gpu, scenario.scheduler.num_scheduler_steps)
    if model.num_attention_heads % tp:
        raise ConfigError(
            source,
            f"{where_from}.tensor_parallel",
            f"{tp} does not divide {model.name}'s {model.num_attention_heads} attention heads",
        )
    if pp > model.num_layers:
        raise ConfigError(
            source, f"{where_from}.pipeline_parallel", f"{pp} stages for {model.name}'s {model.num_layers} layers"
        )
    if scenario.kv.preemption == "swap" and not gpu.pcie_bandwidth_bytes_per_s:
        raise ConfigError(
            source, "kv.preemption", f"swap needs a PCIe bandwidth, which the {gpu.name} profile does not give"
        )
    spec = scenario.speculative
    found = proposer(spec, model, tp, pp, catalogue, source) if spec is not None else NO_PROPOSER
    num_blocks, memory = kv_blocks(scenario, model, gpu, tp, pp, source, where_from, found)
    cost_model = COST_MODELS.get(scenario.cost.kind)(scenario.cost, model, gpu, tp, pp)
    if pp > 1:  # a micro-batch per stage in flight
        cost_model = PipelinedCostModel(cost_model, pp)
    if spec is not None:
        pace = spec.max_tokens_per_step(t.name for t in scenario.workload.tenants)
        cost_model = speculative_cost(spec, cost_model, found, gpu, tp, pace)
    kv_bytes_per_token = kv_bytes_per_token_per_gpu(model, tp, pp) * tp * pp
    return GroupPlan(
        where_from, group.count, model, gpu, tp, pp, num_blocks, kv_bytes_per_token, cost_model, group.role, memory
    )


def kv_blocks(
    scenario: Scenario,
    model: ModelShape,
    gpu: GpuSpec,
    tp: int,
    pp: int,
    source: str,
    where: str,
    draft: Proposer = NO_PROPOSER,
) -> tuple[int, KVMemory]:
    """KV blocks per replica: what the GPU memory left by weights and activations holds, by the engine's
    rule (:func:`clustersim.architecture.engine_kv_memory`), unless fixed. A speculative ``draft``
    model's weights come off the memory first, and its KV cache (a token for each of the target's)
    shares the rest in proportion to their bytes per token."""
    kv = scenario.kv
    block = kv_bytes_per_token_per_gpu(model, tp, pp) * kv.block_size_tokens
    layout = f"tensor_parallel {tp}" + (f" x pipeline_parallel {pp}" if pp > 1 else "")
    batched = scenario.scheduler.max_num_batched_tokens
    activations = activation_reserve_bytes(model, tp, batched)
    memory = engine_kv_memory(model, gpu, tp, pp, kv.gpu_memory_frac, activations, draft.weight_bytes_per_gpu)
    usable = (
        f"{memory.budget_bytes / GIB:.1f} GiB usable ({kv.gpu_memory_frac} x {memory.total_bytes / GIB:.1f} GiB)"
        if memory.budget_bytes < memory.total_bytes
        else f"{memory.total_bytes / GIB:.1f} GiB usable, {kv.gpu_memory_frac} of what is left going to the KV cache"
    )
    if memory.budget_bytes - memory.weight_bytes < block:
        raise ConfigError(
            source,
            f"{where}.tensor_parallel",
            f"{model.name} does not fit on {gpu.name} at {layout}: weights need "
            f"{memory.weight_bytes / GIB:.1f} GiB per GPU plus one KV block ({block / GIB:.3f} GiB); {usable}",
        )
    num_blocks = math.floor(memory.kv_bytes / block)
    if draft.kv_bytes_per_token_per_gpu and num_blocks > 0:
        target_kv = kv_bytes_per_token_per_gpu(model, tp, pp)
        num_blocks = math.floor(num_blocks * target_kv / (target_kv + draft.kv_bytes_per_token_per_gpu))
    if kv.num_blocks is not None:
        return kv.num_blocks, memory
    if num_blocks < 1:
        raise ConfigError(
            source,
            f"{where}.tensor_parallel",
            f"{model.name} does not fit on {gpu.name} at {layout}: weights need {memory.weight_bytes / GIB:.1f} GiB "
            f"per GPU, activations for {batched} batched tokens {activations / GIB:.1f} GiB, the engine's runtime "
            f"{memory.runtime_bytes / GIB:.1f} GiB and one KV block {block / GIB:.3f} GiB; {usable} "
            f"(engine rule {gpu.engine.kv_memory_rule})",
        )
    return num_blocks, memory
