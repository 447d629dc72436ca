"""Wire one run: profiles -> cost model and KV capacity -> SimPy processes -> Parquet logs -> summary."""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import json
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from clustersim import __version__
from clustersim.architecture import (
    GpuSpec,
    ModelShape,
    activation_reserve_bytes,
    kv_bytes_per_token_per_gpu,
    kv_capacity_blocks,
    weight_bytes_per_gpu,
)
from clustersim.clock import HORIZON_PRIORITY, Clock
from clustersim.config.catalogue import Catalogue
from clustersim.config.loader import LoadedScenario
from clustersim.config.scenario import ResolvedGroup, Scenario, tenant_slo
from clustersim.cost.base import CostModel
from clustersim.cost.roofline import RooflineCostModel
from clustersim.errors import ConfigError
from clustersim.eventlog import RunLog
from clustersim.invariants import InvariantViolation, ReplicaEndState, check_run
from clustersim.kvcache.contiguous import ContiguousKV
from clustersim.kvcache.manager import KVManager, KVSpec
from clustersim.kvcache.sequence import Reservation, Reserve
from clustersim.metrics import kv_summary, summarize
from clustersim.registry import default_registries
from clustersim.replica.admission import SloAdmission
from clustersim.replica.batching import POLICIES, StepLimits
from clustersim.replica.core import ReplicaSpec
from clustersim.replica.queues import make_queue
from clustersim.replica.replica import Replica
from clustersim.workload.request import Request
from clustersim.workload.source import Completions, RequestBudget, start_workload
from clustersim.workload.traces import TenantData, load_workload_data

GIB = 2.0**30


@dataclass(frozen=True)
class ReplicaResources:
    """What every replica of the cluster is made of."""

    model: ModelShape
    gpu: GpuSpec
    tensor_parallel: int
    num_kv_blocks: int
    cost_model: CostModel
    kv_bytes_per_token: float  # over all the replica's GPUs


@dataclass(frozen=True)
class RunResult:
    """Where a run's outputs are, and its summary."""

    out_dir: Path
    summary: dict[str, Any]


def resolve_resources(scenario: Scenario, source: str, catalogue: Catalogue) -> list[ReplicaResources]:
    """The resources of every replica, in replica order (one entry per replica)."""
    if scenario.scheduler.slo_admission != "off" and not ttft_targets_s(scenario):
        raise ConfigError(
            source,
            "scheduler.slo_admission",
            f"'{scenario.scheduler.slo_admission}' needs a TTFT target: set slo.ttft_s (or a tenant's slo.ttft_s)",
        )
    if scenario.kv.prefix_caching and scenario.kv.preemption == "swap":
        raise ConfigError(
            source,
            "kv.preemption",
            "swap cannot be combined with kv.prefix_caching (a swapped-out sequence would hold cached blocks "
            "other sequences share); use recompute, which reuses the cached prefix when the request comes back",
        )
    if scenario.kv.prefix_caching and scenario.scheduler.policy == "static":
        raise ConfigError(
            source,
            "kv.prefix_caching",
            "needs an iteration-level policy (continuous, vllm or chunked_prefill): static reserves whole sequences",
        )
    resources: list[ReplicaResources] = []
    for group in scenario.cluster.resolved_groups():
        resources.extend([resolve_group(scenario, group, source, catalogue)] * group.count)
    return resources


def resolve_group(scenario: Scenario, group: ResolvedGroup, source: str, catalogue: Catalogue) -> ReplicaResources:
    """Look up one replica group's profiles, check the model fits, size the KV cache and build the cost model."""
    where_from = group.field_path
    hardware = catalogue.hardware(group.hardware, source, f"{where_from}.hardware")
    model_profile = catalogue.model(scenario.cluster.model, source)
    engine = catalogue.engine(group.engine, source, f"{where_from}.engine")
    model = ModelShape.from_profile(model_profile, group.weight_precision, group.kv_cache_precision)
    gpu = GpuSpec.from_profiles(hardware, engine)
    tp, pp = group.tensor_parallel, group.pipeline_parallel
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
    usable = gpu.memory_bytes * scenario.kv.gpu_memory_frac
    weights = weight_bytes_per_gpu(model, tp, pp)
    block = kv_bytes_per_token_per_gpu(model, tp, pp) * scenario.kv.block_size_tokens
    where = f"tensor_parallel {tp}" + (f" x pipeline_parallel {pp}" if pp > 1 else "")
    if kv_capacity_blocks(model, gpu, tp, scenario.kv.gpu_memory_frac, scenario.kv.block_size_tokens, pp) < 1:
        raise ConfigError(
            source,
            f"{where_from}.tensor_parallel",
            f"{model.name} does not fit on {gpu.name} at {where}: weights need "
            f"{weights / GIB:.1f} GiB per GPU plus one KV block ({block / GIB:.3f} GiB); "
            f"{usable / GIB:.1f} GiB usable ({scenario.kv.gpu_memory_frac} x {gpu.memory_bytes / GIB:.1f} GiB)",
        )
    # activations live first in the memory outside gpu_memory_frac (SGLang's mem_fraction_static
    # semantics: weights + KV inside it, activations and CUDA-graph buffers outside); only the
    # excess eats into the KV cache
    activations = activation_reserve_bytes(model, tp, scenario.scheduler.max_num_batched_tokens)
    reserve = max(0.0, activations - gpu.memory_bytes * (1.0 - scenario.kv.gpu_memory_frac))
    num_blocks = kv_capacity_blocks(
        model, gpu, tp, scenario.kv.gpu_memory_frac, scenario.kv.block_size_tokens, pp, reserve
    )
    if num_blocks < 1 and scenario.kv.num_blocks is None:
        raise ConfigError(
            source,
            f"{where_from}.tensor_parallel",
            f"{model.name} does not fit on {gpu.name} at {where}: weights need {weights / GIB:.1f} GiB per GPU, "
            f"activations for {scenario.scheduler.max_num_batched_tokens} batched tokens {activations / GIB:.1f} GiB "
            f"({reserve / GIB:.1f} GiB beyond the {1 - scenario.kv.gpu_memory_frac:.2f} headroom) "
            f"and one KV block {block / GIB:.3f} GiB; {usable / GIB:.1f} GiB usable "
            f"({scenario.kv.gpu_memory_frac} x {gpu.memory_bytes / GIB:.1f} GiB)",
        )
    if scenario.kv.num_blocks is not None:
        num_blocks = scenario.kv.num_blocks
    if scenario.kv.preemption == "swap" and not gpu.pcie_bandwidth_bytes_per_s:
        raise ConfigError(
            source, "kv.preemption", f"swap needs a PCIe bandwidth, which the {gpu.name} profile does not give"
        )
    costs, _ = default_registries()
    cost_model = costs.get(scenario.cost.kind)(scenario.cost, model, gpu, tp)
    if isinstance(cost_model, RooflineCostModel) and pp > 1:
        cost_model = RooflineCostModel(model, gpu, tp, pp)
    kv_bytes_per_token = kv_bytes_per_token_per_gpu(model, tp, pp) * tp * pp
    return ReplicaResources(model, gpu, tp, num_blocks, cost_model, kv_bytes_per_token)


def scenario_metadata(scenario: Scenario) -> dict[str, str]:
    """Key-value metadata stamped on every output file."""
    resolved = scenario.model_dump_json()
    return {
        "clustersim.version": __version__,
        "clustersim.scenario": resolved,
        "clustersim.scenario_sha256": hashlib.sha256(resolved.encode("utf-8")).hexdigest(),
    }


def _write_json_atomically(path: Path, data: dict[str, Any]) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    os.replace(partial, path)


def kv_reserve(scenario: Scenario, model_max_len_tokens: int) -> Reserve:
    """The KV reservation rule the scenario asks for."""
    kv = scenario.kv
    reservation: Reservation = "grow"
    reserve_tokens = 0
    if kv.allocator == "contiguous":
        reservation = kv.reserve
        reserve_tokens = (
            kv.max_output_tokens if kv.reserve == "max_output" else kv.max_model_len_tokens or model_max_len_tokens
        )
    elif POLICIES.get(scenario.scheduler.policy).whole_sequence_kv:
        reservation = "sequence"
    return Reserve(kv.block_size_tokens, reservation, reserve_tokens)


def prefix_hit_rate(replicas: list[Replica]) -> float | None:
    """Prompt tokens the prefix cache supplied, over the prompt tokens of every first admission."""
    looked_up = sum(r.core.kv.prefix_lookup_tokens for r in replicas)
    return sum(r.core.kv.prefix_hit_tokens for r in replicas) / looked_up if looked_up else None


def ttft_targets_s(scenario: Scenario) -> dict[str, float]:
    """Each tenant's TTFT target: its own SLO's, else the scenario's (tenants without one are absent)."""
    targets: dict[str, float] = {}
    for tenant in scenario.workload.tenants:
        tenant_slo = getattr(tenant, "slo", None)
        target = tenant_slo.ttft_s if tenant_slo is not None and tenant_slo.ttft_s is not None else None
        if target is None and scenario.slo is not None:
            target = scenario.slo.ttft_s
        if target is not None:
            targets[tenant.name] = target
    return targets


CountingEnvironment = Clock  # the name earlier callers use


@contextmanager
def _few_collections() -> Iterator[None]:
    """Run with the objects alive so far frozen and rarer garbage collections (about a tenth of a
    run's time otherwise goes to traversing the same long-lived objects again and again)."""
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


def simulate(
    scenario: Scenario,
    resources: list[ReplicaResources],
    log: RunLog,
    env: CountingEnvironment | None = None,
    workload_data: dict[str, TenantData] | None = None,
) -> tuple[float, list[Replica]]:
    """Run the SimPy model to its stop condition; every request ends up in ``log``.

    ``workload_data``: the traces the tenants read (:func:`load_workload_data`); read here, relative
    to the working directory, when not given. Returns the makespan (from time 0 to the last
    request's end, or to the horizon if requests were still in flight there) and the replicas.
    """
    env = env if env is not None else CountingEnvironment()
    if workload_data is None:
        workload_data = load_workload_data(scenario.workload, Path.cwd(), "scenario")
    completions = Completions(env)
    reserve = kv_reserve(scenario, resources[0].model.max_model_len_tokens)
    sched = scenario.scheduler
    limits = StepLimits(sched.max_num_seqs, sched.max_num_batched_tokens, sched.batch_wait_s)
    last_end_s = 0.0

    def on_final(request: Request) -> None:
        nonlocal last_end_s
        end_s = request.finished_at_s if request.status == "completed" else request.arrival_at_s
        last_end_s = max(last_end_s, end_s)
        log.record_request(request)
        completions.notify(request)  # closed-loop users wait for their request to end

    ttft_targets = ttft_targets_s(scenario)
    priorities = {t.name: getattr(t, "priority", 0) for t in scenario.workload.tenants}
    shared_prefix = {t.name: t.shared_prefix_tokens for t in scenario.workload.tenants}
    replicas = []
    for i in range(scenario.cluster.total_replicas):
        res = resources[i]
        kv_spec = KVSpec(
            num_blocks=res.num_kv_blocks,
            reserve=reserve,
            watermark_blocks=math.ceil(scenario.kv.watermark_frac * res.num_kv_blocks),
            bytes_per_token=res.kv_bytes_per_token,
            prefix_caching=scenario.kv.prefix_caching,
            prefix_block_tokens=scenario.kv.prefix_block_tokens,
            shared_prefix_tokens=shared_prefix,
            host_swap_blocks=(
                int(scenario.kv.host_swap_bytes // (res.kv_bytes_per_token * scenario.kv.block_size_tokens))
                if scenario.kv.preemption == "swap"
                else 0
            ),
        )
        kv: KVManager = ContiguousKV(kv_spec) if scenario.kv.allocator == "contiguous" else KVManager(kv_spec)
        spec = ReplicaSpec(
            i, limits, res.model.max_model_len_tokens, scenario.simulation.fast_forward,
            res.gpu.pcie_bandwidth_bytes_per_s or 0.0,
        )  # fmt: skip
        replicas.append(
            Replica(
                env,
                spec,
                POLICIES.get(sched.policy).build(limits),
                kv,
                SloAdmission(sched.slo_admission, ttft_targets, res.cost_model),
                res.cost_model,
                log,
                on_final,
                make_queue(sched.ordering, priorities),
            )
        )
    _, routers = default_registries()
    router = routers.get(scenario.router.kind)(scenario.router, scenario.seed)

    def dispatch(request: Request) -> None:
        replicas[router.choose(request, replicas)].enqueue(request)

    budget = RequestBudget(scenario.stop.max_requests, scenario.stop.horizon_s)
    start_workload(env, scenario, workload_data, budget, dispatch, completions)
    with _few_collections():
        if scenario.stop.horizon_s is not None:
            env.run(until=env.timer_at(scenario.stop.horizon_s, HORIZON_PRIORITY))  # before anything else due then
        else:
            env.run()
    unfinished = [request for replica in replicas for request in replica.stop()]
    for request in unfinished:
        log.record_request(request)
    # the makespan ends with the last request, or at the horizon if requests were still in flight there
    return (float(env.now) if unfinished else last_end_s), replicas


def run_scenario(loaded: LoadedScenario, out_dir: Path, catalogue: Catalogue | None = None) -> RunResult:
    """Run one scenario and write ``requests.parquet``, ``steps.parquet`` and ``summary.json`` to ``out_dir``."""
    scenario = loaded.scenario
    catalogue = dataclasses.replace(catalogue or Catalogue.builtin(), base_dir=loaded.base_dir)
    resources = resolve_resources(scenario, loaded.source, catalogue)
    workload_data = load_workload_data(scenario.workload, loaded.base_dir, loaded.source)  # before any output
    out_dir.mkdir(parents=True, exist_ok=True)
    incomplete = out_dir / "INCOMPLETE"
    incomplete.write_text("this run did not finish; its files are partial\n", encoding="utf-8")
    log = RunLog(out_dir, scenario_metadata(scenario))
    env = CountingEnvironment()
    try:
        makespan_s, replicas = simulate(scenario, resources, log, env, workload_data)
    except BaseException as exc:
        log.abort()
        incomplete.write_text(f"this run did not finish: {type(exc).__name__}: {exc}\n", encoding="utf-8")
        raise
    log.close()
    requests_table = pq.read_table(log.requests.path)
    steps_table = pq.read_table(log.steps.path)
    memory_table = pq.read_table(log.memory.path)
    try:
        check_run(
            requests_table,
            steps_table,
            scenario,
            [ReplicaEndState(r.core.kv.pool.num_used_blocks, r.kv_blocks_of_running()) for r in replicas],
            memory_table,
        )
    except InvariantViolation as exc:
        incomplete.write_text(f"this run broke an invariant; its files are kept for the bug report: {exc}\n")
        raise
    summary = {
        "scenario": scenario.name,
        "seed": scenario.seed,
        "clustersim_version": __version__,
        "kv_blocks_per_replica": [r.num_kv_blocks for r in resources],
        **summarize(
            requests_table,
            steps_table,
            makespan_s,
            scenario.cluster.total_replicas,
            scenario.slo,
            {tenant.name: tenant_slo(scenario, tenant) for tenant in scenario.workload.tenants},
        ),
        "kv": kv_summary(
            memory_table,
            sum(r.core.num_preemptions for r in replicas),
            prefix_hit_rate(replicas) if scenario.kv.prefix_caching else None,
            sum(r.core.num_swaps for r in replicas),
        ),
        "simulator": {"fast_forward": scenario.simulation.fast_forward, "num_events": env.num_events},
    }
    _write_json_atomically(out_dir / "summary.json", summary)
    incomplete.unlink()
    return RunResult(out_dir, summary)
