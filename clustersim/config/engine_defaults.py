"""A serving engine's scheduler and KV settings, applied where a scenario leaves a field unset (pure).

A scenario that names only ``cluster.engine: vllm-v1`` runs vLLM V1's scheduler with V1's budgets
and prefix caching; any field the scenario sets itself wins. An engine default that contradicts
the scenario's own settings (prefix caching with a contiguous allocator, swap preemption or a
whole-sequence policy) is not applied. The engine of the cluster (not of a replica group) decides.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from clustersim.config.memorytiers import memory_settings
from clustersim.config.profiles import Cited, EngineProfile, HardwareProfile
from clustersim.config.reserve import SeqsRule
from clustersim.config.scenario import KVCache, Scenario, Scheduler
from clustersim.replica.batching import POLICIES

# vllm/engine/arg_utils.py EngineArgs.get_batch_defaults: smaller budgets on A100s and GPUs under 70 GiB
SMALL_GPU_MEMORY_BYTES = 70 * 2**30


def is_small_gpu(hardware: HardwareProfile) -> bool:
    """Whether an engine's small-GPU defaults apply: an A100, or a GPU with less than 70 GiB."""
    return hardware.memory_bytes.value < SMALL_GPU_MEMORY_BYTES or hardware.name.upper().startswith("A100")


def _values(section: Any) -> dict[str, Any]:
    if section is None:
        return {}
    return {
        name: cited.value for name in type(section).model_fields if isinstance(cited := getattr(section, name), Cited)
    }


def reported_memory_bytes(hardware: HardwareProfile) -> float:
    """The memory the driver reports for the GPU (what an engine sizing itself by memory reads)."""
    reported = hardware.memory_reported_bytes
    return reported.value if reported is not None else hardware.memory_bytes.value


def engine_scheduler_defaults(engine: EngineProfile, hardware: HardwareProfile) -> dict[str, Any]:
    """The ``scheduler`` fields the engine sets on this GPU (its running-request rule is the replica's:
    :func:`engine_seqs_rule`)."""
    values = _values(engine.scheduler)
    if is_small_gpu(hardware):
        values.update(_values(engine.scheduler_small_gpu))
    values.pop("max_num_seqs_rule", None)
    return values


def engine_seqs_rule(engine: EngineProfile, scenario: Scenario) -> SeqsRule | None:
    """The engine's rule for its running-request cap by each replica's KV pool, where the scenario sets
    no ``scheduler.max_num_seqs`` of its own (SGLang's ``max_running_requests``)."""
    if "max_num_seqs" in scenario.scheduler.model_fields_set or engine.scheduler is None:
        return None
    rule = engine.scheduler.max_num_seqs_rule
    return rule.value if rule is not None else None


def _memory_defaults(
    scenario: Scenario, hardware: HardwareProfile, scheduler: dict[str, Any], kv: dict[str, Any]
) -> None:
    """Resolve the engine's memory-dependent defaults in ``scheduler`` and ``kv`` (the fields the scenario
    leaves unset): its rule by the GPU's memory where the release has one (SGLang from 0.5.3), else its
    memory fraction by GPUs per replica (SGLang's earlier ``mem_fraction_static`` falls with TP)."""
    by_gpus = kv.pop("gpu_memory_frac_by_gpus", None)
    rule = kv.pop("gpu_memory_rule", None)
    cluster = scenario.cluster
    unset_frac = "gpu_memory_frac" not in scenario.kv.model_fields_set
    if rule is not None and rule.applies_to(cluster.engine_version):
        memory = reported_memory_bytes(hardware)
        sized = memory_settings(rule, memory, cluster.tensor_parallel, cluster.pipeline_parallel)
        if "max_num_batched_tokens" not in scenario.scheduler.model_fields_set:
            scheduler["max_num_batched_tokens"] = sized.chunk_tokens
        if unset_frac:
            kv["gpu_memory_frac"] = sized.gpu_memory_frac
    elif by_gpus and unset_frac:
        gpus = cluster.tensor_parallel * cluster.pipeline_parallel
        kv["gpu_memory_frac"] = by_gpus[max((k for k in by_gpus if k <= gpus), default=min(by_gpus))]


def with_engine_defaults(scenario: Scenario, engine: EngineProfile, hardware: HardwareProfile) -> Scenario:
    """``scenario`` with the engine's scheduler and KV defaults in the fields it leaves unset.

    Raises:
        ValueError: the defaults and the scenario's own settings do not fit together (the message
            names the field to set).
    """
    scheduler_set = scenario.scheduler.model_fields_set
    scheduler = {k: v for k, v in engine_scheduler_defaults(engine, hardware).items() if k not in scheduler_set}
    kv_set = scenario.kv.model_fields_set
    kv = {k: v for k, v in _values(engine.kv).items() if k not in kv_set}
    _memory_defaults(scenario, hardware, scheduler, kv)
    policy = POLICIES.get(scheduler.get("policy", scenario.scheduler.policy))
    own = scenario.kv
    if kv.get("prefix_caching") and (own.allocator != "paged" or own.preemption == "swap" or policy.whole_sequence_kv):
        del kv["prefix_caching"]
    if "block_size_tokens" in kv and own.prefix_block_tokens % kv["block_size_tokens"]:
        del kv["block_size_tokens"]
    if not scheduler and not kv:
        return scenario
    try:
        new_scheduler = Scheduler.model_validate({**scenario.scheduler.model_dump(exclude_unset=True), **scheduler})
        new_kv = KVCache.model_validate({**scenario.kv.model_dump(exclude_unset=True), **kv})
    except ValidationError as exc:
        problem = exc.errors()[0]["msg"].removeprefix("Value error, ")
        given = ", ".join(f"{k}: {v}" for k, v in {**scheduler, **kv}.items())
        raise ValueError(f"{problem} (engine {engine.name} sets {given}; set the field in the scenario)") from None
    return scenario.model_copy(update={"scheduler": new_scheduler, "kv": new_kv})
