"""The ``faults`` and ``autoscaler`` sections of a scenario: replicas that fail, are repaired and
start again; replicas started and stopped by load.

A failed replica loses everything it held: the step in progress, its KV cache, its queue. Each
request it held is retried on a replica that is up (``on_failure: retry``; the prompt and the
tokens streamed so far are prefilled again there, as after a recompute preemption) or lost
(``lose``, or once it has been retried ``max_retries`` times). After ``repair_s`` the replica
starts again cold: it reads its weights from storage and initialises the engine before it is
routed to (:class:`ColdStart`). Failures come from a script (``kind: scripted``) or at random from
each GPU's mean time between failures (``kind: mtbf``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, model_validator

from clustersim.config.base import StrictModel

OnFailure = Literal["retry", "lose"]


class ColdStart(StrictModel):
    """How long a replica takes from power-on to serving: its weights read at
    ``storage_bandwidth_bytes_per_s`` plus ``engine_init_s``.

    Defaults (sources in docs/lifecycle.md): 3.6 GB/s, what Safetensors reached loading
    Llama-3.1-8B-Instruct (16 GB in 4.437 s, mean of 30 loads) on an 8 x H100-SXM server in
    ServerlessLLM's published benchmark (``benchmarks/results/h100_2025``; its own loader took
    0.678 s); 35 s of engine start-up, vLLM V1's logged "init engine ... took 34.11 seconds" with
    torch.compile (7.5 s) and CUDA graph capture (17 s) (vLLM issue #20264; 14.18 s without
    torch.compile, PR #11005, Llama-3-8B).
    """

    storage_bandwidth_bytes_per_s: PositiveFloat = 3.6e9
    engine_init_s: NonNegativeFloat = 35.0


class FaultEvent(StrictModel):
    """One scripted failure: ``replica`` fails at ``at_s``; ``repair_s`` overrides the section's."""

    at_s: NonNegativeFloat
    replica: NonNegativeInt
    repair_s: NonNegativeFloat | None = None


class _FaultsBase(StrictModel):
    """``detect_s``: how long the router keeps sending requests to a failed replica before it learns of
    the failure (0: at once; a Kubernetes readiness probe with its defaults, every 10 s and 3 failures
    in a row, takes up to 30 s). Until then what the replica held and what reaches it waits."""

    on_failure: OnFailure = "retry"
    detect_s: NonNegativeFloat = 0.0
    max_retries: NonNegativeInt = 3
    repair_s: NonNegativeFloat | None = 600.0  # None: a failed replica never comes back
    cold_start: ColdStart = ColdStart()


class ScriptedFaults(_FaultsBase):
    """Failures at given times (a failure of a replica that is already down does nothing)."""

    kind: Literal["scripted"]
    events: tuple[FaultEvent, ...] = Field(min_length=1)


class MtbfFaults(_FaultsBase):
    """Each replica fails at random while it is up, at the rate of its GPUs together: exponential
    gaps of mean ``mtbf_gpu_hours`` divided by its GPU count (its own seeded stream per replica).

    The default, 50,000 GPU-hours, is the Llama 3 paper's measured rate (Dubey et al. 2024,
    arXiv:2407.21783, sec. 3.3.4): 419 unexpected interruptions in a 54-day snapshot on up to 16K
    H100 GPUs, one per ~50,700 GPU-hours (about 78% of them confirmed hardware, GPUs the largest share).
    """

    kind: Literal["mtbf"]
    mtbf_gpu_hours: float = Field(default=50_000.0, ge=0.001)  # at least 3.6 s: a failure storm never ends


Faults = Annotated[ScriptedFaults | MtbfFaults, Field(discriminator="kind")]


class _AutoscalerBase(StrictModel):
    """Start and stop replicas of the cluster's pool (``cluster.num_replicas`` is its most) by load.

    Every ``interval_s`` the policy recommends a replica count; as Kubernetes' Horizontal Pod
    Autoscaler does, a count within ``tolerance_frac`` of the current one changes nothing, and the
    count applied is the lowest recommendation of the last ``scale_up_window_s`` when scaling up and
    the highest of the last ``scale_down_window_s`` when scaling down (HPA's stabilization windows;
    defaults: a 15 s sync period, 10% tolerance, 0 s up and 300 s down, per the Kubernetes HPA
    documentation). A started replica is routed to after its cold start; a stopped one first drains
    (routed nothing new, it finishes what it holds).
    """

    min_replicas: int = Field(default=1, ge=1)
    initial_replicas: int | None = Field(default=None, ge=1)  # None: min_replicas
    interval_s: float = Field(default=15.0, ge=0.1)  # a tick costs an event: not finer than 0.1 s
    tolerance_frac: NonNegativeFloat = 0.1
    scale_up_window_s: NonNegativeFloat = 0.0
    scale_down_window_s: NonNegativeFloat = 300.0
    cold_start: ColdStart = ColdStart()


class QueueLengthAutoscaler(_AutoscalerBase):
    """Requests outstanding (queued or running) per replica up: Knative's concurrency target."""

    kind: Literal["queue_length"]
    target_outstanding_per_replica: PositiveFloat


class KVUseAutoscaler(_AutoscalerBase):
    """The mean fraction of KV blocks in use on the replicas up."""

    kind: Literal["kv_use"]
    target_kv_used_frac: float = Field(gt=0.0, le=1.0)


class SloAutoscaler(_AutoscalerBase):
    """The share of recent requests that missed their targets: the requests that ended within the
    last ``window_s`` (a completed one misses when its TTFT exceeded ``ttft_s`` or its TPOT exceeded
    ``tpot_s``, whichever are set; a rejected or lost one always misses). The metric is that share over
    the share allowed, ``1 - target_attainment_frac``. NVIDIA Dynamo's SLA planner scales a
    disaggregated deployment's prefill workers on TTFT and its decode workers on inter-token latency
    (docs.nvidia.com/dynamo, "Planner"): ``ttft_s`` for a prefill pool, ``tpot_s`` for a decode pool."""

    kind: Literal["slo"]
    ttft_s: PositiveFloat | None = None
    tpot_s: PositiveFloat | None = None
    target_attainment_frac: float = Field(default=0.99, gt=0.0, lt=1.0)
    window_s: PositiveFloat = 60.0

    @model_validator(mode="after")
    def _a_target(self) -> SloAutoscaler:
        if self.ttft_s is None and self.tpot_s is None:
            raise ValueError("kind slo needs a target: set ttft_s, tpot_s or both")
        return self


Autoscaler = Annotated[QueueLengthAutoscaler | KVUseAutoscaler | SloAutoscaler, Field(discriminator="kind")]


class PoolAutoscalers(StrictModel):
    """A disaggregated scenario's autoscalers (``disaggregation.autoscaler``), one per pool: each starts
    and stops the replicas of its role only (its ``min_replicas`` and ``initial_replicas`` count that
    pool's), on a load measured over that pool's replicas. A pool without one keeps all its replicas up.
    NVIDIA Dynamo's load-based planner scales prefill workers on the prefill queue and decode workers
    on KV cache use (docs.nvidia.com/dynamo, "Planner"): ``queue_length`` and ``kv_use``."""

    prefill: Autoscaler | None = None
    decode: Autoscaler | None = None

    @model_validator(mode="after")
    def _one_at_least(self) -> PoolAutoscalers:
        if self.prefill is None and self.decode is None:
            raise ValueError("set an autoscaler for the prefill pool, the decode pool or both")
        return self

    def by_role(self) -> dict[str, Autoscaler]:
        """The pools' autoscalers, by role (prefill first)."""
        pools = {"prefill": self.prefill, "decode": self.decode}
        return {role: scaler for role, scaler in pools.items() if scaler is not None}
