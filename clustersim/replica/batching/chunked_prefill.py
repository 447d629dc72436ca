"""Chunked prefill (Sarathi-Serve, OSDI'24): decodes first, then prompt chunks within the token budget.

Each step's ``max_num_batched_tokens`` goes first to one token per running decode, then to the next
chunks of prompts already started (admission order), then to new prompts, the last one cut to the
budget left. Long prompts therefore never stall the decodes for a whole prefill.
"""

from __future__ import annotations

from clustersim.replica.batching.base import PolicyBase, StepBuilder


class ChunkedPrefill(PolicyBase):
    kind = "chunked_prefill"
    chunks_prompts = True

    def plan(self, step: StepBuilder) -> None:
        step.decode()
        step.swap_in()
        step.continue_prefills()
        step.admit(chunked=True)
