"""vLLM's V0 scheduler (Kwon et al., SOSP'23; vLLM <= 0.6 ``Scheduler._schedule_default``).

A step either prefills newly admitted prompts (running decodes pause for it) or, when nothing can
be admitted, decodes the running sequences. Swapped-out sequences come back before any new
admission.
"""

from __future__ import annotations

from clustersim.replica.batching.base import PolicyBase, StepBuilder


class VllmV0(PolicyBase):
    kind = "vllm_v0"

    def plan(self, step: StepBuilder) -> None:
        step.admit(chunked=False)
        if step.num_prefills == 0:
            step.decode()
            step.swap_in()
