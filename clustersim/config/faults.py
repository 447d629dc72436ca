"""The ``faults`` section of a scenario: replicas that fail, are repaired and start again.

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

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat

from clustersim.config.base import StrictModel

OnFailure = Literal["retry", "lose"]


class ColdStart(StrictModel):
    """How long a replica takes from power-on to serving: its weights read at
    ``storage_bandwidth_bytes_per_s`` plus ``engine_init_s``.

    Defaults (sources in docs/faults.md): 3.6 GB/s, what Safetensors reached loading
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
    on_failure: OnFailure = "retry"
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
    mtbf_gpu_hours: PositiveFloat = 50_000.0


Faults = Annotated[ScriptedFaults | MtbfFaults, Field(discriminator="kind")]
