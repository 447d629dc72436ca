"""vLLM's V1 scheduler (vLLM >= 0.8, the only engine since 0.10; ``vllm/v1/core/sched/scheduler.py``).

One token budget per step (``max_num_batched_tokens``) is spent on the running requests first, in
the order they were admitted: one token for each decoding request, the next chunk for a prompt
still being prefilled (chunked prefill is always on). Waiting requests are then admitted in order,
the last one cut to the budget left, while seats allow. Differences from ``chunked_prefill``:

* KV blocks are taken per chunk (``KVCacheManager.allocate_slots(num_new_tokens)``), not for the
  whole prompt on admission, so more prompts start and a long one can be preempted half-computed;
* when a running request finds no free block the newest running request is preempted and
  recomputed later (V1 has no swap space);
* no request is admitted in a step that preempted one (``if not preempted_reqs``);
* admission stops at the first waiting request whose first chunk's blocks are not free, with no
  watermark.

Running requests are decodes older than any half-prefilled prompt (a prompt admitted behind an
unfinished one only gets the budget that one leaves, so it cannot finish first), so the budget
order here (decodes, then started prompts, then new ones) is V1's running-list order.
"""

from __future__ import annotations

from clustersim.replica.batching.base import PolicyBase, StepBuilder


class VllmV1(PolicyBase):
    kind = "vllm_v1"
    chunks_prompts = True
    kv_per_chunk = True

    def plan(self, step: StepBuilder) -> None:
        step.decode()
        step.continue_prefills()
        if step.num_preempted == 0:
            step.admit(chunked=True)
