"""Continuous batching (Orca, OSDI'22): every iteration admits whole prompts next to the running decodes.

Each step first grows the running decodes (preempting the newest when KV is short), brings
swapped-out sequences back, then admits waiting prompts whole while seats, KV blocks and the token
budget left by the decodes allow.
"""

from __future__ import annotations

from clustersim.replica.batching.base import PolicyBase, StepBuilder


class Continuous(PolicyBase):
    kind = "continuous"

    def plan(self, step: StepBuilder) -> None:
        step.decode()
        step.swap_in()
        step.admit(chunked=False)  # whole prompts: no prompt is left half-computed between steps
